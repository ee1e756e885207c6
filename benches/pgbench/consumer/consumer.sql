\set k random(1, 9000000000000000000)
\set lease 30000000
\set retention 86400000000
BEGIN ISOLATION LEVEL READ COMMITTED;
INSERT INTO pbc.inbox_log (msg_id, biz_key, status, response, created_at, fingerprint, token, lease_until, expires_at) SELECT 'orders:' || :k::text, :k::text, 'done', 'null', t.ts, NULL, 1, LEAST(t.ts + (interval '1 second' * (:lease::int8 / 1000000) + interval '1 microsecond' * (:lease::int8 % 1000000)), timestamptz '9999-12-31 23:59:59+00'), LEAST(t.ts + (interval '1 second' * (:retention::int8 / 1000000) + interval '1 microsecond' * (:retention::int8 % 1000000)), timestamptz '9999-12-31 23:59:59+00') FROM (SELECT COALESCE(timestamptz 'epoch' + (interval '1 second' * (NULL::int8 / 1000000) + interval '1 microsecond' * (NULL::int8 % 1000000)), clock_timestamp()) AS ts) t WHERE pg_try_advisory_xact_lock(hashtextextended('orders:' || :k::text, 7306093102405)) ON CONFLICT (msg_id) DO NOTHING RETURNING txid_current() AS txid \gset
INSERT INTO pbc.effects (msg_id) VALUES ('orders-' || :k::text);
SELECT CASE WHEN txid_current() = :txid THEN 1 ELSE ('not the transaction begun for the handler: ' || txid_current())::int END;
COMMIT;
