#!/usr/bin/env bash
# The WebSub hub under fan-out: smartfeeds with [http] and no XMPP server (the HTTP face and
# the hub do not need one), SUBSCRIBERS WebSub subscriptions to one view whose callbacks the
# load tool serves on loopback, then PUBLISHES publishes over HTTP, one at a time, each
# timed from its answer to its last delivery. The load tool checks that every subscriber
# got every item once, in order, with an unbroken fo:prev_cursor chain.
#
# Usage: scripts/bench-websub.sh            (SUBSCRIBERS [10000], PUBLISHES [20], ROUNDS [3];
#                                            BENCH_SKIP_BUILD=1 uses target/profiling as it is)
set -euo pipefail
cd "$(dirname "$0")/.."
SUBSCRIBERS=${SUBSCRIBERS:-10000}
PUBLISHES=${PUBLISHES:-20}
ROUNDS=${ROUNDS:-3}
[ "${BENCH_SKIP_BUILD:-0}" = 1 ] || cargo build --profile profiling --bin smartfeeds --bin smartfeeds-load >&2
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
token=bench-admin-token-0123456789
cat > "$dir/smartfeeds.toml" <<TOML
admins = ["admin@localhost"]

[component]
jid = "feeds.localhost"
secret = "unused"
server = "127.0.0.1:1"

[store]
path = "$dir/feeds.db"

[http]
listen = "127.0.0.1:$port"

[[http.tokens]]
jid = "admin@localhost"
token = "$token"

[hub]
allow_private_callbacks = true
max_concurrent = 256
max_per_host = 256

[[feeds]]
name = "load"
publishers = ["admin@localhost"]
TOML
for round in $(seq "$ROUNDS"); do
  rm -f "$dir"/feeds.db*
  RUST_LOG=error target/profiling/smartfeeds --config "$dir/smartfeeds.toml" >>"$dir/smartfeeds.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
  target/profiling/smartfeeds-load websub --base "http://127.0.0.1:$port" --token "$token" --in-flight 64 \
    --subscribers "$SUBSCRIBERS" --publishes "$PUBLISHES" --service-pid "$pid" --label "round $round"
  kill "$pid"; wait "$pid" || true
done
