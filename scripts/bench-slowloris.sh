#!/usr/bin/env bash
# The HTTP face under a slow-loris attack (README "Bounds"): an ordinary client's latency
# before and during BENCH_SLOW (10,000) slow-loris connections, and whether a long-poll and
# an event stream held through the attack still get a publish made during it.
#
#   1. an ordinary client makes BENCH_GETS (500) GETs, one new connection each: p50, p99;
#   2. a long-poll and an event stream are opened on the feed "held" (curl);
#   3. scripts/slowloris.py holds BENCH_SLOW connections that send a request line and a
#      header and then nothing, opening each again as soon as the server cuts it off (after
#      header_timeout), for BENCH_HOLD (60) seconds, from 127.0.0.2.. (several source
#      addresses, so ports do not run short);
#   4. once they are all open (the smartfeeds_http_connections gauge says so), the ordinary
#      client's GETs again: p50, p99; then a publish, which the long-poll and the stream
#      must both deliver;
#   5. smartfeeds must still be running (0 crashes).
#
# smartfeeds runs on free loopback ports with max_connections BENCH_MAX_CONNECTIONS (15000)
# and header_timeout BENCH_HEADER_TIMEOUT (10); no XMPP server is needed. The open-file
# limit must allow the connections on both sides (each raises its soft limit to the hard).
#
# Environment: BENCH_SLOW [10000], BENCH_GETS [500], BENCH_HOLD [60], BENCH_SOURCES [8],
# BENCH_MAX_CONNECTIONS [15000], BENCH_HEADER_TIMEOUT [10], BENCH_SKIP_BUILD=1 (use
# target/profiling/smartfeeds as it is), BENCH_OUT (append the JSON line to this file).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
slow=${BENCH_SLOW:-10000}
gets=${BENCH_GETS:-500}
hold=${BENCH_HOLD:-60}
sources=${BENCH_SOURCES:-8}
max_connections=${BENCH_MAX_CONNECTIONS:-15000}
header_timeout=${BENCH_HEADER_TIMEOUT:-10}
name=bench-slowloris
# shellcheck source=scripts/bench-lib.sh
. "$repo/scripts/bench-lib.sh"
bench_build smartfeeds
smartfeeds=$repo/target/profiling/smartfeeds
bench_tmp

bench_start_smartfeeds "$tmp/slowloris.db" "max_connections = $max_connections
header_timeout = $header_timeout"
gauge() { curl -fs "http://127.0.0.1:$metrics/metrics" | sed -n 's/^smartfeeds_http_connections //p'; }
measure() { python3 scripts/slowloris.py measure "$base/feeds/held/?max=10" "$gets"; }
publish() {
	curl -fs -X PUT -H "Authorization: Bearer $token" -H 'content-type: application/atom+xml' \
		--data "<entry xmlns='http://www.w3.org/2005/Atom'><id>urn:$1</id><title>$1</title></entry>" \
		"$base/feeds/held/items/$1"
}
publish first >/dev/null

log "before: $gets GETs"
before=$(measure)
log "before: $before"

curl -s --max-time $((hold + 30)) "$base/feeds/held/?order=created&since=id:first&timeout=$((hold + 20))" >"$tmp/poll.out" &
pids+=($!)
poll_pid=$!
curl -sN --max-time $((hold + 30)) -H 'accept: text/event-stream' "$base/feeds/held/?order=created" >"$tmp/stream.out" &
pids+=($!)

log "holding $slow slow-loris connections for ${hold}s from $sources source addresses"
python3 scripts/slowloris.py hold 127.0.0.1 "$http" "$slow" "$hold" "$sources" >"$tmp/hold.out" &
pids+=($!)
hold_pid=$!
open=0
for _ in $(seq 1 $((hold * 10))); do
	open=$(gauge)
	[ "${open%.*}" -ge "$slow" ] && break
	sleep 0.1
done
log "open connections: $open"
[ "${open%.*}" -ge "$slow" ] || { log "the slow-loris connections did not all open"; exit 1; }

log "during: $gets GETs"
during=$(measure)
open_after=$(gauge)
log "during: $during (open connections after: $open_after)"

published=$(publish during)
wait "$poll_pid" || true
sleep 1
poll_ok=false stream_ok=false
grep -q '"during"' "$tmp/poll.out" && poll_ok=true
grep -q 'during' "$tmp/stream.out" && stream_ok=true
wait "$hold_pid" || true
held=$(cat "$tmp/hold.out")
running=false
kill -0 "$sf_pid" 2>/dev/null && curl -fs "$base/health" >/dev/null && running=true

line=$(python3 - "$before" "$during" "$held" "$open" "$poll_ok" "$stream_ok" "$running" "$published" <<'PY'
import json, sys
before, during, held = (json.loads(a) for a in sys.argv[1:4])
print(json.dumps({
    "bench": "slowloris", "open_connections": int(float(sys.argv[4])), "slow_held": held,
    "before": before, "during": during,
    "long_poll_delivered": sys.argv[5] == "true", "stream_delivered": sys.argv[6] == "true",
    "still_running": sys.argv[7] == "true", "published": json.loads(sys.argv[8] or "null"),
}))
PY
)
echo "$line"
[ -z "${BENCH_OUT:-}" ] || echo "$line" >>"$BENCH_OUT"
echo "# $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$poll_ok" = true ] && [ "$stream_ok" = true ] && [ "$running" = true ]
