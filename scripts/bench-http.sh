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
log() { printf 'bench-http: %s\n' "$*" >&2; }

if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
	log "building the binaries (profile profiling: release with symbols)"
	cargo build --profile profiling --quiet --bin smartfeeds --bin smartfeeds-load
fi
smartfeeds=$repo/target/profiling/smartfeeds
load=$repo/target/profiling/smartfeeds-load

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/smartfeeds-http-XXXXXX")
results=$tmp/results.jsonl
sf_pid=""
cleanup() {
	local status=$?
	[ -z "$sf_pid" ] || kill -TERM "$sf_pid" 2>/dev/null || true
	[ -z "$sf_pid" ] || wait "$sf_pid" 2>/dev/null || true
	rm -rf "$tmp"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

token="bench-token-$$-$RANDOM$RANDOM"
# Starts smartfeeds on the database $1; sets sf_pid, http and metrics.
start_smartfeeds() {
	http=$(free_port)
	metrics=$(free_port)
	cat >"$tmp/smartfeeds.toml" <<-TOML
		admins = ["bench@localhost"]
		autocreate = true
		[component]
		jid = "feeds.localhost"
		secret = "unused"
		server = "127.0.0.1:$(free_port)"
		[store]
		path = "$1"
		[http]
		listen = "127.0.0.1:$http"
		[[http.tokens]]
		jid = "bench@localhost"
		token = "$token"
		[metrics]
		listen = "127.0.0.1:$metrics"
	TOML
	"$smartfeeds" check-config --config "$tmp/smartfeeds.toml" >/dev/null
	RUST_LOG=${RUST_LOG:-warn} "$smartfeeds" --config "$tmp/smartfeeds.toml" 2>>"$tmp/smartfeeds.log" &
	sf_pid=$!
	for _ in $(seq 1 100); do
		curl -fs "http://127.0.0.1:$http/health" >/dev/null 2>&1 && return
		sleep 0.1
	done
	log "smartfeeds did not answer on its HTTP port:"
	tail -n 20 "$tmp/smartfeeds.log" >&2
	exit 1
}
stop_smartfeeds() {
	kill -TERM "$sf_pid" 2>/dev/null || true
	wait "$sf_pid" 2>/dev/null || true
	sf_pid=""
}
load_http() {
	local mode=$1 feed=$2
	shift 2
	"$load" "$mode" --base "http://127.0.0.1:$http" --feed "$feed" --token "$token" --service-pid "$sf_pid" \
		--duration 3600 --label "http/smartfeeds" "$@"
}

load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ " $only " == *" longpoll "* ]]; then
	start_smartfeeds "$tmp/longpoll.db"
	log "long-polls: $polls held on one view, then one publish"
	load_http http-longpoll load --view order=modified --polls "$polls" --hold "$hold" --in-flight 500 \
		--metrics "http://127.0.0.1:$metrics/metrics" >>"$results"
	stop_smartfeeds
fi
if [[ " $only " == *" archive "* ]]; then
	mkdir -p target/bench-data
	db=$repo/target/bench-data/http-archive-$archive_items.db
	start_smartfeeds "$db"
	have=$(curl -fs -H "Authorization: Bearer $token" "http://127.0.0.1:$http/feeds/big/?max=0" |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["totalItems"])' 2>/dev/null || echo 0)
	if [ "$have" -lt "$archive_items" ]; then
		log "filling feed big with $((archive_items - have)) items over HTTP (once; kept in $db)"
		load_http http-publish big --items $((archive_items - have)) --prefix "fill$have" --in-flight 256 >>"$results"
	fi
	log "archives: $archive_rounds fetches each of four documents of $archive_items items"
	load_http http-archive big --rounds "$archive_rounds" --in-flight 8 >>"$results"
	stop_smartfeeds
fi

[ -z "${BENCH_OUT:-}" ] || cat "$results" >>"$BENCH_OUT"
echo "# $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1); load average at start: $load_at_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$load" table "$results"
