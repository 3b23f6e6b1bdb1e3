-- Automation tasks live in files (.craft/tasks/<id>/task.md, as DotCraft keeps
-- them); this table holds only who runs each task now and its retries, so that of
-- several processes or nodes exactly one runs a due task, and a run whose node
-- died is found. A row exists while a task runs, or while it waits for a retry.
CREATE TABLE automation_runs (
    task_id       TEXT PRIMARY KEY,
    node_id       TEXT,                      -- the node running it (NULL: waiting to retry)
    attempts      BIGINT NOT NULL DEFAULT 0,  -- runs in a row that ended unexpectedly
    retry_at_ms   BIGINT,                    -- the next attempt not before (epoch ms)
    claimed_at_ms BIGINT                     -- when node_id took it (epoch ms)
);
