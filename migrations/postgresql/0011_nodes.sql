-- Several server nodes on one database (docs/scale-out.md).

-- Each live node's heartbeat, on the database's clock (nodes' clocks may
-- differ). A node whose heartbeat is older than the lease is dead: any node
-- then fails the turns it ran.
CREATE TABLE cluster_nodes (
    node_id        TEXT PRIMARY KEY,
    workspace_path TEXT NOT NULL,
    started_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    endpoints_json TEXT
);

-- The node that runs (leases) a turn.
ALTER TABLE turns ADD COLUMN node_id TEXT;

-- One running turn per thread across every node.
CREATE UNIQUE INDEX turns_one_running ON turns (thread_id)
    WHERE status IN ('running', 'waitingApproval');

-- Events as the nodes exchange them: deltas are stored too (stream = the
-- item id; dropped once their item has long completed), with the node that
-- wrote the event and whether it goes to every connection.
ALTER TABLE thread_events ADD COLUMN stream TEXT;
ALTER TABLE thread_events ADD COLUMN node_id TEXT;
ALTER TABLE thread_events ADD COLUMN broadcast BOOLEAN NOT NULL DEFAULT false;

-- The sweep that prunes old deltas reads only stored deltas.
CREATE INDEX thread_events_deltas ON thread_events (created_at) WHERE stream IS NOT NULL;

-- Requests one node passes to the node that runs a turn (interrupt, steer,
-- an approval's answer). The target takes each row (DELETE ... RETURNING),
-- so each is carried out once.
CREATE TABLE cluster_commands (
    id         BIGSERIAL PRIMARY KEY,
    node_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    body_json  TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX cluster_commands_by_node ON cluster_commands (node_id, id);

-- The workspace every node must see: its token is also written to
-- <workspace>/.craft/cluster-workspace, so a node whose workspace path is not
-- the same shared directory refuses to start.
CREATE TABLE cluster_workspace (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    token      TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The node running a cron job's due run: the others skip the job while that
-- node is alive, and run it if it dies before recording the run.
ALTER TABLE cron_jobs ADD COLUMN claimed_by TEXT;
