\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO pbx.seen (key) VALUES ('k' || :k::text) ON CONFLICT DO NOTHING;
INSERT INTO pbx.payments (body) VALUES ('{"amount"=1}') RETURNING id;
UPDATE pbx.seen SET response = '{"payment"=1}' WHERE key = 'k' || :k::text;
COMMIT;
