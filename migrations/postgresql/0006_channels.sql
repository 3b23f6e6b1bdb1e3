-- External channel configurations (externalChannel/* methods). DotCraft keeps
-- them under "ExternalChannels" in .craft/config.json; this server keeps
-- them here. Names are unique ignoring case, as DotCraft matches them.
-- SQLite's NOCASE as an ICU collation: equality, the primary key and ORDER BY
-- ignore case (COLLATE NOCASE in a query names this collation too).
CREATE COLLATION IF NOT EXISTS nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false);

CREATE TABLE external_channels (
    name              TEXT NOT NULL PRIMARY KEY COLLATE nocase,
    enabled           BIGINT NOT NULL,
    transport         TEXT NOT NULL CHECK (transport IN ('subprocess', 'websocket')),
    command           TEXT,
    args_json         TEXT,                    -- JSON array of strings, NULL when none
    working_directory TEXT,
    env_json          TEXT,                    -- JSON object of strings, NULL when none
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);
