-- Several server nodes sharing one database is a PostgreSQL feature: this
-- version's tables (node heartbeats, turn leases, stored deltas, cross-node
-- commands) are in migrations/postgresql/0011_nodes.sql. An SQLite file has
-- one server; only the column the shared cron code writes is added here.

-- The node running a cron job's due run (always NULL with SQLite).
ALTER TABLE cron_jobs ADD COLUMN claimed_by TEXT;
