#!/usr/bin/env bash
# Measures sources (SPEC §13) with the release binary, documents served from loopback by a
# small Python server (python3's http.server; it answers If-Modified-Since with 304):
#
#   1. import: one source of 10,000 entries in 20 documents of 500 linked by prev-archive
#      (RFC 5005), imported on the first fetch; entries/s from the start of the fetch to the
#      commit ("source imported" in the log), fetching and parsing included;
#   2. polling: 1,000 sources at a 30 s interval (10 entries each, ~4 KB), smartfeeds' CPU
#      time (user + system, /proc) per fetch over WINDOW seconds after the first round,
#      once with every fetch answered 304 (If-Modified-Since) and once with every fetch
#      answered 200 with the same body (parsed, diffed, nothing committed).
#
#   scripts/bench-sources.sh [WINDOW]     (default 90 s: three rounds of the 1,000 sources)
#
# BENCH_KEEP=1 keeps the work directory (documents, configurations, logs).
# smartfeeds runs without an XMPP server (its link keeps retrying, which costs nothing
# measurable); nothing listens beyond 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
window=${1:-90}
cargo build --release --quiet --bin smartfeeds
bin=$PWD/target/release/smartfeeds
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -n "${BENCH_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
tick=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
fetches() { curl -fsS "http://127.0.0.1:$1/metrics" | awk '/^smartfeeds_source_fetches_total/ {n += $2} END {print n + 0}'; }
errors() { curl -fsS "http://127.0.0.1:$1/metrics" | awk '/^smartfeeds_source_fetches_total\{outcome="error"\}/ {n += $2} END {print n + 0}'; }

# The documents.
python3 - "$work/www" <<'EOF'
import os, sys, datetime
root = sys.argv[1]
def entry(n, prefix):
    t = (datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(minutes=n)).isoformat()
    return (f"<entry><id>urn:{prefix}:{n}</id><title>Entry {n} of the {prefix} source</title>"
            f"<link href='https://blog.example/{prefix}/{n}'/><published>{t}</published><updated>{t}</updated>"
            f"<author><name>Writer {n % 7}</name></author><category term='topic-{n % 5}'/>"
            f"<content type='html'>&lt;p&gt;{'Some words of the entry. ' * 8}&lt;/p&gt;</content></entry>")
def feed(entries, extra=""):
    return ("<?xml version='1.0' encoding='utf-8'?>\n<feed xmlns='http://www.w3.org/2005/Atom'>"
            f"<title>t</title><id>urn:t</id><updated>2024-01-01T00:00:00Z</updated>{extra}{''.join(entries)}</feed>")
os.makedirs(f"{root}/big")
for k in range(1, 21):
    prev = f"<link rel='prev-archive' href='/big/{k - 1}.xml'/>" if k > 1 else ""
    name = "recent" if k == 20 else str(k)
    with open(f"{root}/big/{name}.xml", "w") as f:
        f.write(feed([entry(n, "big") for n in range(k * 500, (k - 1) * 500, -1)], prev))
os.makedirs(f"{root}/s")
for s in range(1000):
    with open(f"{root}/s/{s}.xml", "w") as f:
        f.write(feed([entry(n, f"s{s}") for n in range(10, 0, -1)]))
EOF

# The document server: MODE=conditional answers If-Modified-Since with 304, MODE=full
# ignores it (every fetch a 200 with the same body).
cat >"$work/serve.py" <<'EOF'
import functools, http.server, os, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    def send_head(self):
        if os.environ.get("MODE") == "full":
            for h in ("If-Modified-Since", "If-None-Match"):
                del self.headers[h]
        return super().send_head()
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Every source is fetched at start: a deep listen backlog, so none waits for a SYN retry.
    request_queue_size = 2048
    def handle_error(self, request, client_address):
        pass
Server(("127.0.0.1", int(sys.argv[1])), functools.partial(Handler, directory=sys.argv[2])).serve_forever()
EOF
www_port=$(free_port)
# Starts the document server in mode $1 and waits until it answers.
serve() {
	MODE=$1 python3 "$work/serve.py" "$www_port" "$work/www" &
	pids+=($!)
	www=$!
	for _ in $(seq 100); do curl -fsS -o /dev/null "http://127.0.0.1:$www_port/s/0.xml" 2>/dev/null && return; sleep 0.1; done
	echo "the document server did not start" >&2
	exit 1
}
serve conditional

# Starts smartfeeds on a fresh database with the [[feeds]] tables in $2; $1 names the run.
start() {
	local run=$1 feeds=$2 metrics
	metrics=$(free_port)
	mkdir -p "$work/$run"
	cat >"$work/$run/c.toml" <<EOT
[component]
jid = "feeds.localhost"
secret = "s"
server = "127.0.0.1:1"
[store]
path = "$work/$run/feeds.db"
[metrics]
listen = "127.0.0.1:$metrics"
[sources]
allow_private = true
$feeds
EOT
	RUST_LOG=info "$bin" --config "$work/$run/c.toml" >"$work/$run/log" 2>&1 &
	pids+=($!)
	sf=$!
	sf_metrics=$metrics
	for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$metrics/metrics" >/dev/null 2>&1 && break; sleep 0.1; done
}

# 1. The import.
start import "[[feeds]]
name = \"big\"
source = \"http://127.0.0.1:$www_port/big/recent.xml\"
source_interval = 3600"
for _ in $(seq 600); do grep -q "source imported" "$work/import/log" && break; sleep 0.1; done
python3 - "$work/import/log" <<'EOF'
import re, sys, datetime
lines = open(sys.argv[1]).read().splitlines()
def at(needle):
    line = next(l for l in lines if needle in l)
    return datetime.datetime.fromisoformat(re.match(r"\S+", line).group(0).replace("Z", "+00:00")), line
start, _ = at("fetching sources")
end, line = at("source imported")
secs = (end - start).total_seconds()
n = int(re.search(r"published=(\d+)", line).group(1))
print(f"import: {n} entries in {secs:.2f} s, {n / secs:.0f} entries/s (fetch of 20 documents, parse, one transaction)")
EOF
kill "$sf"

# 2. Polling 1,000 sources.
feeds=$(for s in $(seq 0 999); do printf '[[feeds]]\nname = "s%d"\nsource = "http://127.0.0.1:%d/s/%d.xml"\nsource_interval = 30\n' "$s" "$www_port" "$s"; done)
for mode in conditional full; do
	kill "$www" 2>/dev/null || true
	sleep 0.5
	serve "$mode"
	start "poll-$mode" "$feeds"
	# The first round imports every source; measure from the end of it.
	for _ in $(seq 600); do [ "$(fetches "$sf_metrics")" -ge 1000 ] && break; sleep 0.1; done
	sleep 5
	c0=$(cpu_ticks "$sf")
	f0=$(fetches "$sf_metrics")
	e0=$(errors "$sf_metrics")
	sleep "$window"
	c1=$(cpu_ticks "$sf")
	f1=$(fetches "$sf_metrics")
	e1=$(errors "$sf_metrics")
	rss=$(awk '/VmRSS/ {print $2}' "/proc/$sf/status")
	kill "$sf"
	python3 -c "
c, f, e, w = ($c1 - $c0) / $tick, $f1 - $f0, $e1 - $e0, $window
label = {'conditional': 'answered 304', 'full': 'answered 200, same body'}['$mode']
print(f'polling, {label}: {f} fetches ({e} failed) in {w} s, CPU {c:.2f} s ({100 * c / w:.1f} % of one core), '
      f'{1000 * c / max(f, 1):.2f} ms per fetch, RSS {$rss / 1024:.0f} MiB')
"
done
