#!/usr/bin/env bash
# The demo: a private Prosody on 127.0.0.1 plus smartfeeds serving feeds.localhost, with a
# demo feed ("comments") whose source is demo/comments.atom (SPEC §13: smartfeeds reads it
# at start and every minute; edit it and the changes are pushed). Installs Prosody (and
# curl) if missing and builds smartfeeds. Everything lives under ./run; nothing listens
# beyond 127.0.0.1.
#
#   scripts/demo.sh          start (prints how to connect)
#   scripts/demo.sh --stop   stop both
set -euo pipefail
cd "$(dirname "$0")/.."
run=run
mkdir -p "$run"

stop() {
	if [ -f "$run/smartfeeds.pid" ] && kill "$(cat "$run/smartfeeds.pid")" 2>/dev/null; then
		echo "stopped smartfeeds"
	fi
	rm -f "$run/smartfeeds.pid"
	PROSODY_RUN_DIR="$run/prosody" sh prosody/start.sh --stop
}

if [ "${1:-}" = "--stop" ]; then
	stop
	exit 0
fi

missing=()
command -v prosody >/dev/null 2>&1 || missing+=(prosody)
command -v curl >/dev/null 2>&1 || missing+=(curl) # checks that the demo feed is imported
command -v make >/dev/null 2>&1 || missing+=(make) # builds jemalloc, the service's allocator
if [ "${#missing[@]}" -gt 0 ]; then
	echo "installing ${missing[*]} (Debian packages)..."
	if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
	echo "cargo is needed to build smartfeeds (https://rustup.rs)" >&2
	exit 1
fi
cargo build --release --quiet --bin smartfeeds

stop >/dev/null 2>&1 || true
PROSODY_RUN_DIR="$run/prosody" sh prosody/start.sh --background
for _ in $(seq 100); do
	grep -q "Activated service 'component'" "$run/prosody/prosody.log" 2>/dev/null && break
	sleep 0.1
done

RUST_LOG=${RUST_LOG:-info} nohup target/release/smartfeeds --config smartfeeds.example.toml >"$run/smartfeeds.log" 2>&1 &
echo $! >"$run/smartfeeds.pid"
for _ in $(seq 100); do
	grep -q "connected" "$run/smartfeeds.log" 2>/dev/null && break
	sleep 0.1
done
if ! grep -q "connected" "$run/smartfeeds.log"; then
	echo "smartfeeds did not connect; its log:" >&2
	tail -20 "$run/smartfeeds.log" >&2
	exit 1
fi

# The demo feed comes from its source, demo/comments.atom, imported at start (a database
# kept from an earlier demo may hold more items than the source's 12).
imported() {
	total=$(curl -fsS 'http://127.0.0.1:8080/feeds/comments/?max=0' 2>/dev/null |
		sed -n 's/.*"totalItems":\([0-9]*\).*/\1/p')
	[ "${total:-0}" -ge 12 ]
}
for _ in $(seq 100); do
	imported && break
	sleep 0.1
done
if ! imported; then
	echo "the demo feed was not imported from demo/comments.atom; smartfeeds' log:" >&2
	tail -20 "$run/smartfeeds.log" >&2
	exit 1
fi

cat <<EOT

smartfeeds is running: the component feeds.localhost, connected to a private Prosody.

  Connect an XMPP client to 127.0.0.1:5222 (no TLS; plain password login allowed) as
  alice@localhost, bob@localhost, bot@localhost (a publisher) or admin@localhost,
  password "password". Then, to feeds.localhost:
    - disco#items lists the feeds; the demo feed is "comments" (the 12 entries of its
      source, demo/comments.atom: add or edit an entry there and within a minute it is
      pushed, or at once with
      curl -d hub.mode=publish -d hub.url=demo/comments.atom http://127.0.0.1:8080/hub);
    - pull:       <items node="comments?order=modified"/> with an RSM <set><max>10</max></set>
    - subscribe:  <subscribe node="comments?order=modified" jid="alice@localhost"/>
    - publish as bot@localhost to node "comments" and watch the push arrive.

  Over HTTP (see README, "The HTTP face"):
    - the page:   http://127.0.0.1:8080/   (feeds you may read, newest items, live)
    - pull:       curl 'http://127.0.0.1:8080/feeds/comments/?order=modified&max=10'
    - stream:     curl -N -H 'Accept: text/event-stream' 'http://127.0.0.1:8080/feeds/comments/?order=modified'
    - publish:    curl -X PUT -H 'Authorization: Bearer demo-bot-token-0123456789' \
                    -H 'Content-Type: application/atom+xml' \
                    --data '<entry xmlns="http://www.w3.org/2005/Atom"><title>Hi</title></entry>' \
                    http://127.0.0.1:8080/feeds/comments/items/hello

  Logs:  $run/smartfeeds.log, $run/prosody/prosody.log
  Stop:  scripts/demo.sh --stop
EOT
