\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO pbc.seen (msg_id) VALUES ('orders:' || :k::text) ON CONFLICT DO NOTHING;
INSERT INTO pbc.effects (msg_id) VALUES ('orders-' || :k::text);
COMMIT;
