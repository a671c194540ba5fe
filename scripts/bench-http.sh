#!/usr/bin/env bash
# The HTTP face under load (SPEC §9, §11), with smartfeeds-load's HTTP modes:
#   1. long-polls: BENCH_POLLS (10,000) held at once on one view, then one publish: the
#      service's memory while holding them, and the time until the last is answered (every
#      answer must carry the published item);
#   2. archives: a feed of BENCH_ARCHIVE_ITEMS (1,000,000) items, filled over HTTP once and
#      kept in target/bench-data/: the recent, the newest full, a middle and the oldest
#      archive document, BENCH_ARCHIVE_ROUNDS fetches each; the oldest must cost what the
#      recent one does.
# HTTP pulls side by side with XMPP pulls through Prosody and ejabberd are in
# scripts/bench-peers.sh (service smartfeeds-http).
#
# smartfeeds runs with [http] and [metrics] on free loopback ports; no XMPP server is
# needed for these figures (its component link retries in the background). The load tool
# acts with an admin's token, so the rate limit does not apply.
#
# Environment: BENCH_POLLS [10000], BENCH_HOLD [60] (seconds each poll asks to be held),
# BENCH_ARCHIVE_ITEMS [1000000], BENCH_ARCHIVE_ROUNDS [500], BENCH_ONLY (longpoll|archive)
# [both], BENCH_SKIP_BUILD=1 (use the binaries in target/profiling as they are), BENCH_OUT
# (append the JSON lines to this file).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
polls=${BENCH_POLLS:-10000}
hold=${BENCH_HOLD:-60}
archive_items=${BENCH_ARCHIVE_ITEMS:-1000000}
archive_rounds=${BENCH_ARCHIVE_ROUNDS:-500}
only=${BENCH_ONLY:-longpoll archive}
name=bench-http
# shellcheck source=scripts/bench-lib.sh
. "$repo/scripts/bench-lib.sh"
bench_build smartfeeds smartfeeds-load
smartfeeds=$repo/target/profiling/smartfeeds
load=$repo/target/profiling/smartfeeds-load
bench_tmp
results=$tmp/results.jsonl

load_http() {
	local mode=$1 feed=$2
	shift 2
	"$load" "$mode" --base "http://127.0.0.1:$http" --feed "$feed" --token "$token" --service-pid "$sf_pid" \
		--duration 3600 --label "http/smartfeeds" "$@"
}

load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ " $only " == *" longpoll "* ]]; then
	bench_start_smartfeeds "$tmp/longpoll.db"
	log "long-polls: $polls held on one view, then one publish"
	load_http http-longpoll load --view order=modified --polls "$polls" --hold "$hold" --in-flight 500 \
		--metrics "http://127.0.0.1:$metrics/metrics" >>"$results"
	bench_stop_smartfeeds
fi
if [[ " $only " == *" archive "* ]]; then
	mkdir -p target/bench-data
	db=$repo/target/bench-data/http-archive-$archive_items.db
	bench_start_smartfeeds "$db"
	have=$(curl -fs -H "Authorization: Bearer $token" "http://127.0.0.1:$http/feeds/big/?max=0" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["totalItems"])' 2>/dev/null || echo 0)
	if [ "$have" -lt "$archive_items" ]; then
		log "filling feed big with $((archive_items - have)) items over HTTP (once; kept in $db)"
		load_http http-publish big --items $((archive_items - have)) --prefix "fill$have" --in-flight 256 >>"$results"
	fi
	log "archives: $archive_rounds fetches each of four documents of $archive_items items"
	load_http http-archive big --rounds "$archive_rounds" --in-flight 8 >>"$results"
	bench_stop_smartfeeds
fi

[ -z "${BENCH_OUT:-}" ] || cat "$results" >>"$BENCH_OUT"
echo "# $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1); load average at start: $load_at_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$load" table "$results"
