-- The tables of benches/pgbench/consumer.sh, in a schema of their own (pbc): `inbox_log` as
-- PgStore creates it (schema version 4), the floor's dedup table and the effect's table of
-- retry-amqp's consumer bench.
DROP SCHEMA IF EXISTS pbc CASCADE;
CREATE SCHEMA pbc;
CREATE TABLE pbc.inbox_log (
    msg_id TEXT NOT NULL PRIMARY KEY,
    biz_key TEXT NOT NULL,
    status TEXT NOT NULL,
    response TEXT,
    created_at timestamptz NOT NULL,
    fingerprint TEXT,
    token BIGINT NOT NULL,
    lease_until timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    in_transaction BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX ON pbc.inbox_log (created_at);
CREATE TABLE pbc.seen (msg_id TEXT PRIMARY KEY);
CREATE TABLE pbc.effects (msg_id TEXT NOT NULL);
CREATE INDEX ON pbc.effects (msg_id COLLATE "C");
