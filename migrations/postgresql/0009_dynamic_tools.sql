-- The tools a client declared in thread/start.dynamicTools, as their wire
-- objects (camelCase JSON array of DynamicToolSpec): offered to the model on
-- every turn of the thread, also after a restart. Goes with its thread.
CREATE TABLE thread_dynamic_tools (
    thread_id  TEXT PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    tools_json TEXT NOT NULL
);
