-- PostgreSQL twin of migrations/0001_threads.sql (same version numbers, same
-- tables; INTEGER is BIGINT here because SQLite's INTEGER is 64-bit).

-- Threads, turns and items. Items are stored once completed; deltas never are.

CREATE TABLE threads (
    id                 TEXT PRIMARY KEY,
    workspace_path     TEXT NOT NULL,
    workspace_key      TEXT NOT NULL,          -- lower-cased path: case-insensitive match
    user_id            TEXT NOT NULL,
    origin_channel     TEXT NOT NULL,
    channel_context    TEXT,
    display_name       TEXT,
    status             TEXT NOT NULL CHECK (status IN ('active', 'paused', 'archived')),
    history_mode       TEXT NOT NULL DEFAULT 'server',
    source_kind        TEXT NOT NULL DEFAULT 'user',
    source_json        TEXT,
    metadata_json      TEXT NOT NULL DEFAULT '{}',
    configuration_json TEXT,
    created_at         TEXT NOT NULL,          -- ISO-8601 UTC, fixed width: sorts as text
    last_active_at     TEXT NOT NULL,
    turn_count         BIGINT NOT NULL DEFAULT 0
);

-- thread/list: owner filter, newest activity first, keyset paging on (last_active_at, id).
CREATE INDEX threads_by_owner
    ON threads (workspace_key, user_id, last_active_at DESC, id DESC);
-- thread/list with crossChannelOrigins.
CREATE INDEX threads_by_origin
    ON threads (workspace_key, origin_channel, last_active_at DESC, id DESC);

CREATE TABLE turns (
    thread_id        TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id               TEXT NOT NULL,
    seq              BIGINT NOT NULL,         -- position in the thread, from 1
    status           TEXT NOT NULL,
    started_at       TEXT NOT NULL,
    completed_at     TEXT,
    token_usage_json TEXT,
    error            TEXT,
    origin_channel   TEXT,
    initiator_json   TEXT,
    PRIMARY KEY (thread_id, id)
);

CREATE UNIQUE INDEX turns_by_seq ON turns (thread_id, seq);

CREATE TABLE items (
    thread_id    TEXT NOT NULL,
    turn_id      TEXT NOT NULL,
    id           TEXT NOT NULL,
    seq          BIGINT NOT NULL,             -- position in the thread, from 1
    type         TEXT NOT NULL,
    status       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    completed_at TEXT,
    payload_json TEXT NOT NULL,
    PRIMARY KEY (thread_id, id),
    FOREIGN KEY (thread_id, turn_id) REFERENCES turns (thread_id, id) ON DELETE CASCADE
);

CREATE INDEX items_by_turn ON items (thread_id, turn_id, seq);
