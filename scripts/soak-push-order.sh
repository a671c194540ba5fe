#!/usr/bin/env bash
# Soaks the push-order guarantees of several instances on one PostgreSQL (SPEC §12): runs
# each scenario of tests/e2e_push_order.rs RUNS times (default 20) against ejabberd (or the
# server SMARTFEEDS_TEST_SERVER names) — PostgreSQL restarted three times with
# `pg_ctl restart -m fast`, the pushing instance SIGKILLed and restarted three times,
# PostgreSQL down for 10 s — each run with publishers at full speed through two instances
# and subscribers on two views each. The scenarios run side by side (each has its own
# PostgreSQL and XMPP server). Prints, per scenario, the runs, the failed runs, the pushes
# out of order, lost and repeated, and the longest pause between pushes; exits non-zero if
# any run failed. Usage: scripts/soak-push-order.sh [RUNS] [SCENARIO…], SCENARIO one of
# restarts, kill, down (all three by default). Logs in target/soak-push-order/.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-20}"
shift || true
scenarios=("$@")
[ "${#scenarios[@]}" -gt 0 ] || scenarios=(restarts kill down)
export SMARTFEEDS_TEST_SERVER="${SMARTFEEDS_TEST_SERVER:-ejabberd}" SMARTFEEDS_SOAK_RUNS="$runs"

cargo build --quiet --bin smartfeeds
cargo test --quiet --no-run --test e2e_push_order
log_dir="target/soak-push-order"
mkdir -p "$log_dir"
pids=()
for scenario in "${scenarios[@]}"; do
	case "$scenario" in
	restarts) test=pushes_keep_commit_order_through_postgresql_restarts ;;
	kill) test=pushes_of_a_killed_instance_are_taken_over_in_order_with_none_lost ;;
	down) test=pushes_pause_while_postgresql_is_down_and_resume_in_order ;;
	*) echo "unknown scenario $scenario (restarts, kill, down)" >&2; exit 2 ;;
	esac
	echo "$scenario: $runs runs, log in $log_dir/$scenario.log"
	cargo test --quiet --test e2e_push_order -- --exact "$test" --nocapture >"$log_dir/$scenario.log" 2>&1 &
	pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
	wait "$pid" || status=1
done
for scenario in "${scenarios[@]}"; do
	log="$log_dir/$scenario.log"
	echo "== $scenario"
	grep -E '^push-order .* total:' "$log" || { echo "no total (see $log):"; grep -E '^push-order|panicked' -A1 "$log" | tail -8; }
done
exit "$status"
