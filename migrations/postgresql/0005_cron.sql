-- Cron jobs (cron/* methods and the agent's cron tool) and the heartbeat's
-- thread. Times are epoch milliseconds, as on the wire.

CREATE TABLE cron_jobs (
    id               TEXT PRIMARY KEY,         -- 8 hex characters
    name             TEXT NOT NULL,
    message          TEXT NOT NULL,            -- the prompt each run sends
    schedule_json    TEXT NOT NULL,            -- wire CronSchedule, validated
    enabled          BIGINT NOT NULL,
    delete_after_run BIGINT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    -- Where runs happen. dedicated = 1: the job's own thread, made on the first
    -- run (thread_id NULL until then, and again if that thread was deleted).
    -- dedicated = 0: a thread the job was given; if it is gone, runs fail.
    thread_id        TEXT,
    dedicated        BIGINT NOT NULL,
    approval_policy  TEXT,                     -- for the dedicated thread's configuration
    next_run_at_ms   BIGINT,
    last_run_at_ms   BIGINT,
    last_status      TEXT CHECK (last_status IN ('ok', 'error')),
    last_error       TEXT,
    last_thread_id   TEXT,
    last_result      TEXT,
    -- SQLite's implicit rowid, which breaks ties in creation order (cron/list).
    rowid            BIGSERIAL NOT NULL
);

-- The scheduler's question: the earliest enabled job.
CREATE INDEX cron_jobs_due ON cron_jobs (enabled, next_run_at_ms);

-- One row: the thread heartbeat turns run in, and the last outcome.
CREATE TABLE heartbeat_state (
    id             BIGINT PRIMARY KEY CHECK (id = 1),
    thread_id      TEXT,
    last_run_at_ms BIGINT,
    last_result    TEXT,
    last_error     TEXT
);
