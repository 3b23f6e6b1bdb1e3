-- Front doors other than JSON-RPC ("faces") name their conversations in their
-- own terms: a Zene session id, a Codeswarm (job, node). Each maps to one
-- ordinary thread. Replies are kept for idempotent retries (Zene's
-- idempotency_key), so a repeat in a later process gets the stored answer.
CREATE TABLE face_sessions (
    face       TEXT NOT NULL,
    key        TEXT NOT NULL,
    thread_id  TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (face, key)
);

CREATE TABLE face_replies (
    face       TEXT NOT NULL,
    key        TEXT NOT NULL,
    reply_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (face, key)
);
