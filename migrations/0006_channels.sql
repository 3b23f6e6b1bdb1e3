-- External channel configurations (externalChannel/* methods). DotCraft keeps
-- them under "ExternalChannels" in .craft/config.json; this server keeps
-- them here. Names are unique ignoring case, as DotCraft matches them.
CREATE TABLE external_channels (
    name              TEXT NOT NULL PRIMARY KEY COLLATE NOCASE,
    enabled           INTEGER NOT NULL,
    transport         TEXT NOT NULL CHECK (transport IN ('subprocess', 'websocket')),
    command           TEXT,
    args_json         TEXT,                    -- JSON array of strings, NULL when none
    working_directory TEXT,
    env_json          TEXT,                    -- JSON object of strings, NULL when none
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
) WITHOUT ROWID;
