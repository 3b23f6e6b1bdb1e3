-- Thread event log (for thread/subscribe afterSeq replay), the input queue,
-- and approvals granted with acceptAlways.

-- Every thread-scoped notification except streaming deltas, in seq order.
-- params_json is the notification's params without "seq".
CREATE TABLE thread_events (
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    method      TEXT NOT NULL,
    topic       TEXT,                          -- finer filter than method (e.g. item:commandExecution)
    params_json TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);

-- The highest seq handed out for the thread (deltas included), so numbering
-- continues after a restart.
ALTER TABLE threads ADD COLUMN last_seq BIGINT NOT NULL DEFAULT 0;

-- Monotonic counters behind turn_NNN / item_NNN ids: never reused, even
-- after thread/rollback deleted the newest turns.
ALTER TABLE threads ADD COLUMN turn_serial BIGINT NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN item_serial BIGINT NOT NULL DEFAULT 0;

CREATE TABLE queued_inputs (
    thread_id    TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id           TEXT NOT NULL,
    position     BIGINT NOT NULL,
    payload_json TEXT NOT NULL,
    PRIMARY KEY (thread_id, id)
);

CREATE INDEX queued_inputs_by_position ON queued_inputs (thread_id, position);

-- acceptAlways: the exact (kind, operation, target) is approved from now on.
CREATE TABLE approval_grants (
    kind       TEXT NOT NULL,
    operation  TEXT NOT NULL,
    target     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (kind, operation, target)
);
