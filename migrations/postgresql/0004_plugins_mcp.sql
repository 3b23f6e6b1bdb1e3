-- Plugin switches and workspace MCP server configurations.
-- DotCraft keeps both in .craft/config.json (Plugins.DisabledPlugins and
-- McpServers); here they live in SQLite. Plugin files stay on disk under
-- .craft/plugins/<id>/; plugin-bundled MCP servers are read from those files
-- and never stored here.

-- Explicit enable/disable choices. A plugin without a row is enabled (DotCraft's
-- default for installed plugins).
CREATE TABLE plugin_settings (
    id_key     TEXT PRIMARY KEY,               -- lower-cased: plugin ids match case-insensitively
    plugin_id  TEXT NOT NULL,                  -- as spelled when last written
    enabled    BIGINT NOT NULL CHECK (enabled IN (0, 1)),
    updated_at TEXT NOT NULL                   -- ISO-8601 UTC
);

-- Workspace-origin MCP servers (mcp/upsert, mcp/remove).
CREATE TABLE mcp_servers (
    name_key    TEXT PRIMARY KEY,              -- lower-cased: server names match case-insensitively
    name        TEXT NOT NULL,                 -- as spelled by the last upsert
    config_json TEXT NOT NULL,                 -- the McpServerConfig wire object (camelCase)
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
