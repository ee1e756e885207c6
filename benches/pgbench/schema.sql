-- Tables for benches/pgbench/run.sh, one schema each (dropped and made again):
-- pbx: `inbox_log` as PgStore makes it today (schema version 2), and the floor's `seen`;
-- pbn: a narrower `inbox_log` (integer times and fingerprint, `status` a "char", `biz_key`
--      NULL when it is the key, one secondary index);
-- pbm: the narrower one without its secondary index.
DROP SCHEMA IF EXISTS pbx, pbn, pbm CASCADE;
CREATE SCHEMA pbx;
CREATE TABLE pbx.inbox_log (
    msg_id TEXT NOT NULL PRIMARY KEY,
    biz_key TEXT NOT NULL,
    status TEXT NOT NULL,
    response TEXT,
    created_at TEXT COLLATE "C" NOT NULL,
    fingerprint TEXT,
    token BIGINT NOT NULL,
    lease_until TEXT COLLATE "C" NOT NULL,
    expires_at TEXT COLLATE "C" NOT NULL,
    in_transaction BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX ON pbx.inbox_log (created_at);
CREATE TABLE pbx.payments (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE pbx.seen (key TEXT PRIMARY KEY, response TEXT);
CREATE SCHEMA pbn;
CREATE TABLE pbn.inbox_log (
    msg_id TEXT PRIMARY KEY, biz_key TEXT, status "char" NOT NULL, response TEXT,
    created_at BIGINT NOT NULL, fingerprint BIGINT, token BIGINT NOT NULL,
    lease_until BIGINT NOT NULL, expires_at BIGINT NOT NULL,
    in_transaction BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX ON pbn.inbox_log (expires_at);
CREATE TABLE pbn.payments (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);
CREATE SCHEMA pbm;
CREATE TABLE pbm.inbox_log (LIKE pbn.inbox_log INCLUDING DEFAULTS);
ALTER TABLE pbm.inbox_log ADD PRIMARY KEY (msg_id);
CREATE TABLE pbm.payments (id BIGSERIAL PRIMARY KEY, body TEXT NOT NULL);
