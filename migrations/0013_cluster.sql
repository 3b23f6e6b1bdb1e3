-- Several processes on one SQLite file (docs/architecture.md, "Several
-- processes on one workspace"): the tables migrations/postgresql/0011 gives
-- the PostgreSQL nodes, with times as Unix seconds (REAL) from SQLite's clock,
-- which every process on the machine shares.

-- Each live process's heartbeat.
CREATE TABLE cluster_nodes (
    node_id        TEXT PRIMARY KEY,
    workspace_path TEXT NOT NULL,
    started_at     REAL NOT NULL,
    heartbeat_at   REAL NOT NULL,
    endpoints_json TEXT
);

-- The process that runs (leases) a turn.
ALTER TABLE turns ADD COLUMN node_id TEXT;

-- One running turn per thread across every process.
CREATE UNIQUE INDEX turns_one_running ON turns (thread_id)
    WHERE status IN ('running', 'waitingApproval');

-- Events as the processes exchange them: deltas are stored too (stream = the
-- item id; dropped once their item has long completed).
ALTER TABLE thread_events ADD COLUMN stream TEXT;
ALTER TABLE thread_events ADD COLUMN node_id TEXT;
ALTER TABLE thread_events ADD COLUMN broadcast INTEGER NOT NULL DEFAULT 0;
CREATE INDEX thread_events_deltas ON thread_events (created_at) WHERE stream IS NOT NULL;

-- Requests one process passes to the process that runs a turn.
CREATE TABLE cluster_commands (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    body_json  TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX cluster_commands_by_node ON cluster_commands (node_id, id);

-- What PostgreSQL's NOTIFY carries: (thread, first, last, node, broadcast)
-- of each appended batch, in commit order. Processes poll it (cheaply: only
-- when PRAGMA data_version says another connection committed); old rows go.
CREATE TABLE cluster_announcements (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id  TEXT NOT NULL,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    node_id    TEXT NOT NULL,
    broadcast  INTEGER NOT NULL,
    created_at REAL NOT NULL
)
