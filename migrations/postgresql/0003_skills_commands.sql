-- Skills the workspace switched off with skills/setEnabled (DotCraft keeps
-- this list as Skills.DisabledSkills in .craft/config.json). The skill files
-- themselves stay on disk; only the switch lives here.
-- The commands family keeps no state: custom commands are .md files.

CREATE TABLE disabled_skills (
    name_key    TEXT PRIMARY KEY,              -- lower-cased: skill names match case-insensitively
    name        TEXT NOT NULL,                 -- as spelled when it was disabled
    disabled_at TEXT NOT NULL                  -- ISO-8601 UTC
);
