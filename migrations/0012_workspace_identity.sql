-- A random id given to each database when it is created. The user's trust in a
-- workspace names the database it was given for (appserver/storage/trust.py), so
-- a database that arrives with a checkout is not covered by trust given earlier.
CREATE TABLE workspace_identity (
    id TEXT PRIMARY KEY
);
INSERT INTO workspace_identity (id) VALUES (lower(hex(randomblob(16))));
