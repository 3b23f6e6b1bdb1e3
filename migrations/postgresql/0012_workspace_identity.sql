-- A random id given to each database when it is created (see migrations/0012_workspace_identity.sql).
-- A shared PostgreSQL store never arrives with a checkout; the id is kept for parity.
CREATE TABLE workspace_identity (
    id TEXT PRIMARY KEY
);
INSERT INTO workspace_identity (id) VALUES (md5(random()::text || clock_timestamp()::text));
