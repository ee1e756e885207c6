\set k random(1, 9000000000000000000)
BEGIN ISOLATION LEVEL READ COMMITTED;
INSERT INTO pbn.inbox_log (msg_id, status, created_at, fingerprint, token, lease_until, expires_at) SELECT '~s4-https11-' || :k::text, 'p', t.us, 1234567890123, 1, t.us + 30000000, t.us + 2592000000000 FROM (SELECT (extract(epoch from clock_timestamp()) * 1000000)::int8 AS us) t WHERE pg_try_advisory_xact_lock(hashtextextended('~s4-https11-' || :k::text, 0)) ON CONFLICT (msg_id) DO NOTHING RETURNING txid_current();
INSERT INTO pbn.payments (body) VALUES ('{"amount"=1}') RETURNING id;
WITH u AS (UPDATE pbn.inbox_log SET status = 'd', response = '{"status"=201,"headers"=[["content-type","text/plain; charset=utf-8"]],"body"="{\\"payment\\"=1}"}' WHERE msg_id = '~s4-https11-' || :k::text AND token = 1 AND status = 'p' AND txid_current() = txid_current() RETURNING 1) SELECT CASE WHEN txid_current() = txid_current() THEN 1 / (SELECT count(*)::int FROM u) ELSE 0 END;
COMMIT;
