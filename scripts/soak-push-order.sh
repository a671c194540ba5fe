#!/usr/bin/env bash
# Soaks the push-order guarantees of several instances on one PostgreSQL (SPEC §12): runs
# each scenario of tests/e2e_push_order.rs RUNS times (default 20) against ejabberd (or the
# server SMARTFEEDS_TEST_SERVER names) — PostgreSQL restarted three times with
# `pg_ctl restart -m fast`, the pushing instance SIGKILLed and restarted three times,
# PostgreSQL down for 10 s — each run with publishers at full speed through two instances
# and subscribers on two views each. Prints, per scenario, the runs, the failed runs and the
# pushes out of order, lost and repeated, and the longest pause between pushes.
# Exits non-zero if any run failed. Usage: scripts/soak-push-order.sh [RUNS] [SCENARIO…]
# with SCENARIO one of restarts, kill, down (all three by default).
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-20}"
shift || true
scenarios=("$@")
[ "${#scenarios[@]}" -gt 0 ] || scenarios=(restarts kill down)
export SMARTFEEDS_TEST_SERVER="${SMARTFEEDS_TEST_SERVER:-ejabberd}" SMARTFEEDS_SOAK_RUNS="$runs"

cargo build --quiet --bin smartfeeds
cargo test --quiet --no-run --test e2e_push_order 2>/dev/null
log_dir="target/soak-push-order"
mkdir -p "$log_dir"
status=0
for scenario in "${scenarios[@]}"; do
	case "$scenario" in
	restarts) test=pushes_keep_commit_order_through_postgresql_restarts ;;
	kill) test=pushes_of_a_killed_instance_are_taken_over_in_order_with_none_lost ;;
	down) test=pushes_pause_while_postgresql_is_down_and_resume_in_order ;;
	*) echo "unknown scenario $scenario (restarts, kill, down)" >&2; exit 2 ;;
	esac
	log="$log_dir/$scenario.log"
	echo "== $scenario: $runs runs (log: $log)"
	if ! cargo test --quiet --test e2e_push_order -- --exact "$test" --nocapture >"$log" 2>&1; then
		status=1
	fi
	grep -E '^push-order .* total:' "$log" || { echo "no total: see $log"; tail -20 "$log"; }
done
exit "$status"
