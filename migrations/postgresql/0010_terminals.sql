-- Background terminals the agent started (shell run_in_background): each as its
-- wire object without output (camelCase JSON BackgroundTerminal), so a field
-- added to the protocol later round-trips without a migration. The output is
-- in the file named by outputPath. A row still 'running' when a server opens
-- belonged to a server that went away: it is reported, and rewritten, as
-- 'lost'. Goes with its thread.
CREATE TABLE terminals (
    session_id    TEXT PRIMARY KEY,
    thread_id     TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    status        TEXT NOT NULL,
    started_at    TEXT NOT NULL,
    terminal_json TEXT NOT NULL
);

CREATE INDEX terminals_by_thread ON terminals (thread_id, started_at);
