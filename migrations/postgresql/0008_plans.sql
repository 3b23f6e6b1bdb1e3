-- The agent's plan of a thread (DotCraft's thread_plans): the whole snapshot
-- CreatePlan / UpdateTodos last wrote, as its wire object (camelCase JSON), so
-- a field added to the protocol later round-trips without a migration. Goes
-- with its thread.
CREATE TABLE thread_plans (
    thread_id  TEXT PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    plan_json  TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
