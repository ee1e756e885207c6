#!/usr/bin/env bash
# The statements of retry-amqp's consumer bench at the SQL level (BENCHMARKS.md, "Queue
# consumers"): the floor's transaction against the `Consumer`'s on `PgStore`, and the latter
# with one thing changed at a time. For each script named: its tables truncated and a
# CHECKPOINT, then `pgbench -M prepared` with C clients (8) for T seconds (10); prints
# transactions/s and the server's CPU time a transaction, read from /proc: the utime and stime
# of every postgres process on this machine, its exited backends' included (the postmaster's
# cutime and cstime), so the server must run here and nothing else use it. Unlike
# pg_stat_statements' executor time, this counts what a statement costs around its plan: the
# protocol, the snapshot, the wake-ups.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5544/retry_test benches/pgbench/consumer.sh \
#       floor consumer consumer_no_check floor consumer consumer_no_check
#
# Scripts (benches/pgbench/consumer/): floor (`BEGIN`, `INSERT .. ON CONFLICT DO NOTHING`, the
# effect, `COMMIT`); consumer (`BEGIN ISOLATION LEVEL READ COMMITTED`, the claim written `done`
# as `claim_answered_in_transaction` writes it, the effect, the check that the transaction is
# the one begun, `COMMIT`); and consumer with one line changed: consumer_no_check,
# consumer_select_1 (`SELECT 1` for the check), consumer_plain_begin (`BEGIN`). Creates (and
# replaces) the schema pbc in that database.
set -euo pipefail
cd "$(dirname "$0")/consumer"
: "${DATABASE_URL:?set DATABASE_URL to a throwaway PostgreSQL database on this machine}"
T="${T:-10}"
C="${C:-8}"
export PGOPTIONS="-c client_min_messages=warning"
sql() { psql -X -At -q "$DATABASE_URL" -c "$1"; }
# Clock ticks of the server so far.
ticks() {
    local total=0 pid t
    for pid in $(pgrep -x postgres); do
        t=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pid/stat" 2>/dev/null || echo 0)
        total=$((total + t))
    done
    echo "$total"
}
# The script NAME's text: a file of consumer/, or consumer.sql with one line changed.
text() {
    case $1 in
        consumer_no_check) grep -v '^SELECT CASE' consumer.sql ;;
        consumer_select_1) sed 's/^SELECT CASE.*/SELECT 1;/' consumer.sql ;;
        consumer_plain_begin) sed 's/^BEGIN ISOLATION LEVEL READ COMMITTED;/BEGIN;/' consumer.sql ;;
        *) cat "$1.sql" ;;
    esac
}
hz=$(getconf CLK_TCK)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
psql -X -q "$DATABASE_URL" -f schema.sql >/dev/null
for script in "$@"; do
    text "$script" >"$scratch/$script.sql"
    if [[ $script == consumer_* ]] && cmp -s "$scratch/$script.sql" consumer.sql; then
        echo "$script: consumer.sql no longer has the line it changes" >&2
        exit 1
    fi
    sql "TRUNCATE pbc.inbox_log, pbc.seen, pbc.effects; CHECKPOINT"
    before=$(ticks)
    out=$(pgbench -n -M prepared -c "$C" -j 2 -T "$T" -f "$scratch/$script.sql" "$DATABASE_URL" 2>&1)
    after=$(ticks)
    tps=$(awk '/^tps/ { printf "%.0f", $3 }' <<<"$out")
    tx=$(awk '/actually processed/ { split($NF, n, "/"); print n[1] }' <<<"$out")
    [ "${tx:-0}" -gt 0 ] || { echo "$out" >&2; exit 1; }
    echo "$script: $tps tps, $(( (after - before) * 1000000 / hz / tx )) µs of server CPU a transaction"
done
