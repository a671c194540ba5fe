#!/usr/bin/env bash
# The HTTP face under load (SPEC §9, §11), with smartfeeds-load's HTTP modes:
#   1. long-polls: BENCH_POLLS (10,000) held at once on one view, then one publish: the
#      service's memory while holding them, and the time until the last is answered (every
#      answer must carry the published item);
#   2. archives: a feed of BENCH_ARCHIVE_ITEMS (1,000,000) items, filled over HTTP once and
#      kept in target/bench-data/: the recent, the newest full, a middle and the oldest
#      archive document, BENCH_ARCHIVE_ROUNDS fetches each; the oldest must cost what the
#      recent one does.
#   3. pulls: a 50-item page of a feed, JSON and Atom, and If-None-Match revalidations (304),
#      with wrk (BENCH_WRK_SECONDS each), against smartfeeds and against nginx serving the
#      very same bytes from files: the limit;
#   4. fan-out: BENCH_FANOUT_SIZES (2000 10000) event streams, then long-polls, on one view,
#      BENCH_PUBLISHES (10) publishes each, with smartfeeds-load http-fanout, against
#      smartfeeds and against Nchan (nginx's pub/sub module) on the same machine.
# In 3 and 4 the two sides run alternately, BENCH_ROUNDS (3) rounds, in one run, so both see
# the same machine; the summary gives medians. nginx (with libnginx-mod-nchan) runs as a
# private server on a free loopback port with a configuration in the temporary directory.
# HTTP pulls side by side with XMPP pulls through Prosody and ejabberd are in
# scripts/bench-peers.sh (service smartfeeds-http).
#
# smartfeeds runs with [http] and [metrics] on free loopback ports; no XMPP server is
# needed for these figures (its component link retries in the background). The load tool
# acts with an admin's token, so the rate limit does not apply.
#
# Environment: BENCH_POLLS [10000], BENCH_HOLD [60] (seconds each poll asks to be held),
# BENCH_ARCHIVE_ITEMS [1000000], BENCH_ARCHIVE_ROUNDS [500], BENCH_ONLY (any of longpoll
# archive pulls fanout) [all], BENCH_ROUNDS [3], BENCH_WRK_SECONDS [8], BENCH_FANOUT_SIZES
# [2000 10000], BENCH_FANOUT_KINDS [sse longpoll], BENCH_PUBLISHES [10], BENCH_SKIP_BUILD=1 (use the binaries in target/profiling as they are), BENCH_OUT
# (append the JSON lines to this file).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
polls=${BENCH_POLLS:-10000}
hold=${BENCH_HOLD:-60}
archive_items=${BENCH_ARCHIVE_ITEMS:-1000000}
archive_rounds=${BENCH_ARCHIVE_ROUNDS:-500}
only=${BENCH_ONLY:-longpoll archive pulls fanout}
rounds=${BENCH_ROUNDS:-3}
wrk_seconds=${BENCH_WRK_SECONDS:-8}
fanout_sizes=${BENCH_FANOUT_SIZES:-2000 10000}
fanout_kinds=${BENCH_FANOUT_KINDS:-sse longpoll}
publishes=${BENCH_PUBLISHES:-10}
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

# A private nginx with Nchan on a free loopback port, serving $tmp/www as files; sets
# nginx_port and nginx_worker (its one worker process, whose CPU is nginx's).
start_nginx() {
	nginx_port=$(free_port)
	mkdir -p "$tmp/nginx" "$tmp/www"
	cat >"$tmp/nginx/nginx.conf" <<-NGINX
		load_module /usr/lib/nginx/modules/ngx_nchan_module.so;
		user root;
		worker_processes 1;
		worker_rlimit_nofile 19000;
		daemon off;
		pid $tmp/nginx/nginx.pid;
		error_log $tmp/nginx/error.log warn;
		events { worker_connections 18000; }
		http {
			access_log off;
			client_body_temp_path $tmp/nginx/body;
			proxy_temp_path $tmp/nginx/proxy;
			fastcgi_temp_path $tmp/nginx/fastcgi;
			uwsgi_temp_path $tmp/nginx/uwsgi;
			scgi_temp_path $tmp/nginx/scgi;
			types { application/json json; application/atom+xml atom; }
			server {
				listen 127.0.0.1:$nginx_port;
				root $tmp/www;
				location ~ ^/pub/(\w+)\$ { nchan_publisher; nchan_channel_id \$1; nchan_message_buffer_length 20; nchan_message_timeout 5m; }
				location ~ ^/sub/(\w+)\$ { nchan_subscriber; nchan_channel_id \$1; nchan_subscriber_first_message newest; }
			}
		}
	NGINX
	nginx -c "$tmp/nginx/nginx.conf" -p "$tmp/nginx" &
	pids+=("$!")
	for _ in $(seq 1 100); do
		nginx_worker=$(pgrep -P "${pids[-1]}" | head -n 1 || true)
		code=$(curl -so /dev/null -w '%{http_code}' "http://127.0.0.1:$nginx_port/" || true)
		[ -n "$nginx_worker" ] && [ "$code" != 000 ] && return
		sleep 0.1
	done
	log "nginx did not start:"
	cat "$tmp/nginx/error.log" >&2
	exit 1
}

ticks() { cut -d')' -f2 "/proc/$1/stat" | awk '{print $12 + $13}'; }

# One wrk run: appends a JSON line {mode, target, case, rate, cpu_us_per_req} to $results.
# $1 target name, $2 its process (for its CPU), $3 case, $4 URL, then wrk's -H options.
wrk_run() {
	local target=$1 pid=$2 case=$3 url=$4
	shift 4
	local before after out rate
	before=$(ticks "$pid")
	out=$(wrk -t1 -c32 -d"${wrk_seconds}s" "$@" "$url")
	after=$(ticks "$pid")
	rate=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
	local non2xx
	non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
	python3 - "$target" "$case" "$rate" "$before" "$after" "$(getconf CLK_TCK)" "$wrk_seconds" "${non2xx:-0}" >>"$results" <<-'PY'
		import json, sys
		target, case, rate, before, after, hz, secs, bad = sys.argv[1:]
		reqs = float(rate) * float(secs)
		cpu_us = (int(after) - int(before)) / int(hz) * 1e6
		print(json.dumps({"mode": "wrk", "target": target, "case": case, "rate": float(rate),
			"cpu_us_per_req": round(cpu_us / reqs, 2) if reqs else None, "non_2xx_3xx": int(bad)}))
	PY
	log "wrk $case $target: $rate/s"
}

if [[ " $only " == *" pulls "* ]]; then
	bench_start_smartfeeds "$tmp/pulls.db"
	start_nginx
	log "pulls: a 50-item page, smartfeeds and nginx (the same bytes as files), $rounds rounds"
	load_http http-publish pulls --items 60 --payload-bytes 200 --in-flight 8 >>"$results"
	page="http://127.0.0.1:$http/feeds/pulls/?max=50"
	auth="Authorization: Bearer $token"
	curl -fs -H "$auth" -H "Accept: application/json" "$page" >"$tmp/www/page.json"
	curl -fs -H "$auth" -H "Accept: application/atom+xml" "$page" >"$tmp/www/page.atom"
	etag=$(curl -fsI -H "$auth" -H "Accept: application/json" "$page" | tr -d '\r' | awk -F': ' 'tolower($1)=="etag" {print $2}')
	nginx_etag=$(curl -fsI "http://127.0.0.1:$nginx_port/page.json" | tr -d '\r' | awk -F': ' 'tolower($1)=="etag" {print $2}')
	log "page: JSON $(stat -c %s "$tmp/www/page.json") bytes, Atom $(stat -c %s "$tmp/www/page.atom") bytes"
	for round in $(seq "$rounds"); do
		wrk_run smartfeeds "$sf_pid" json "$page" -H "$auth" -H "Accept: application/json"
		wrk_run nginx "$nginx_worker" json "http://127.0.0.1:$nginx_port/page.json"
		wrk_run smartfeeds "$sf_pid" atom "$page" -H "$auth" -H "Accept: application/atom+xml"
		wrk_run nginx "$nginx_worker" atom "http://127.0.0.1:$nginx_port/page.atom"
		wrk_run smartfeeds "$sf_pid" 304 "$page" -H "$auth" -H "Accept: application/json" -H "If-None-Match: $etag"
		wrk_run nginx "$nginx_worker" 304 "http://127.0.0.1:$nginx_port/page.json" -H "If-None-Match: $nginx_etag"
	done
	bench_stop_smartfeeds
	kill "${pids[-1]}" && wait "${pids[-1]}" 2>/dev/null || true
fi
if [[ " $only " == *" fanout "* ]]; then
	start_nginx
	for kind in $fanout_kinds; do
		for n in $fanout_sizes; do
			log "fan-out: $n $kind subscribers, $publishes publishes, smartfeeds and Nchan alternately, $rounds rounds"
			for round in $(seq "$rounds"); do
				# A fresh process each time, so its memory before the subscribers is its own;
				# room for every subscriber and the publisher's connection.
				bench_start_smartfeeds "$tmp/fanout.db" "max_connections = 19000"
				load_http http-fanout fan --view order=modified --kind "$kind" --subscribers "$n" \
					--publishes "$publishes" --in-flight 1000 >>"$results"
				bench_stop_smartfeeds
				"$load" http-fanout --base "http://127.0.0.1:$nginx_port" --feed "fan${kind}${n}r$round" --target nchan \
					--kind "$kind" --subscribers "$n" --publishes "$publishes" --in-flight 1000 \
					--service-pid "$nginx_worker" --duration 3600 --label "http/nchan" >>"$results"
			done
		done
	done
fi

[ -z "${BENCH_OUT:-}" ] || cat "$results" >>"$BENCH_OUT"
echo "# $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1); load average at start: $load_at_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$load" table "$results"
# Medians of the side-by-side runs.
python3 - "$results" <<-'PY'
	import json, statistics, sys
	runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
	groups = {}
	for r in runs:
	    if r.get("mode") == "wrk":
	        groups.setdefault(("pull", r["case"], r["target"]), []).append(r)
	    elif str(r.get("mode", "")).startswith("fanout-"):
	        groups.setdefault((r["mode"], r["subscribers"], r["target"]), []).append(r)
	def med(rs, k):
	    vals = [r[k] for r in rs if r.get(k) is not None]
	    return round(statistics.median(vals), 2) if vals else None
	for key, rs in sorted(groups.items(), key=lambda kv: [str(x) for x in kv[0]]):
	    if key[0] == "pull":
	        print(f"{key[1]:>5} {key[2]:<10} rate/s {med(rs, 'rate')}  CPU µs/req {med(rs, 'cpu_us_per_req')}  (n={len(rs)})")
	    else:
	        print(f"{key[0]} {key[1]:>6} {key[2]:<10} to last p50 ms {med(rs, 'to_last_p50_ms')}  "
	              f"CPU µs/event service {med(rs, 'service_cpu_us_per_event')} tool {med(rs, 'tool_cpu_us_per_event')}  "
	              f"KiB/held {med(rs, 'service_kib_per_held')}  errors {sum(r.get('errors', 0) for r in rs)}  (n={len(rs)})")
PY
