#!/usr/bin/env bash
# The one-commit layer's statements at the SQL level, against the floor's and against a narrower
# `inbox_log` (BENCHMARKS.md, "PostgreSQL: where the layer's extra cost goes"): for each script
# named, its tables truncated and a CHECKPOINT, then `pgbench -M prepared` with 16 clients (the
# pools' size) for T seconds; prints transactions/s, WAL bytes and server time (from
# pg_stat_statements, which must be in shared_preload_libraries) per transaction.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:55442/retry_test benches/pgbench/run.sh \
#       today narrow floor today narrow floor today narrow floor
#
# Scripts: today (the claim as TRY_INSERT writes it, the booking, `done` checked against the
# token, COMMIT), narrow, narrow_pk_only, narrow_small_response (the floor's response), floor.
# pgbench reads `:name` as a variable, so the timestamp formats write `X` for `:`; the same
# width. Creates (and replaces) the schemas pbx, pbn and pbm in that database.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?set DATABASE_URL to a throwaway PostgreSQL database}"
T="${T:-20}"
export PGOPTIONS="-c client_min_messages=warning"
sql() { psql -X -At -q "$DATABASE_URL" -c "$1"; }
psql -X -q "$DATABASE_URL" -f schema.sql >/dev/null
sql "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
for script in "$@"; do
    sql "TRUNCATE pbx.inbox_log, pbx.payments, pbx.seen, pbn.inbox_log, pbn.payments, pbm.inbox_log, pbm.payments; CHECKPOINT"
    sql "SELECT pg_stat_statements_reset()" >/dev/null
    from=$(sql "SELECT pg_current_wal_lsn()")
    out=$(pgbench -n -M prepared -c 16 -j 2 -T "$T" -f "$script.sql" "$DATABASE_URL" 2>&1)
    tps=$(awk '/^tps/ { printf "%.0f", $3 }' <<<"$out")
    tx=$(awk '/actually processed/ { split($NF, n, "/"); print n[1] }' <<<"$out")
    [ -n "$tx" ] || { echo "$out" >&2; exit 1; }
    wal=$(sql "SELECT round(pg_wal_lsn_diff(pg_current_wal_lsn(), '$from') / $tx)")
    us=$(sql "SELECT round((sum(total_exec_time) * 1000 / $tx)::numeric, 1) FROM pg_stat_statements")
    echo "$script: $tps tps, $wal WAL bytes and $us µs of server time a transaction"
done
