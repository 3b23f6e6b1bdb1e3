-- SubAgent child threads (DotCraft's thread_spawn_edges): who spawned whom,
-- with the child's nickname, role, profile and what the parent may do with it.
-- The key is the pair; a spawn or a close/resume upserts the row. Goes with
-- either thread.
CREATE TABLE thread_spawn_edges (
    parent_thread_id    TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    child_thread_id     TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    parent_turn_id      TEXT,
    depth               INTEGER NOT NULL,
    agent_nickname      TEXT,
    agent_role          TEXT,
    profile_name        TEXT,
    runtime_type        TEXT,
    supports_send_input INTEGER NOT NULL,
    supports_resume     INTEGER NOT NULL,
    supports_close      INTEGER NOT NULL,
    status              TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    PRIMARY KEY (parent_thread_id, child_thread_id)
) WITHOUT ROWID;
CREATE INDEX thread_spawn_edges_child ON thread_spawn_edges (child_thread_id);
