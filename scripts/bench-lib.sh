# What the single-instance benchmark scripts (bench-http.sh, bench-slowloris.sh) share,
# sourced by them after setting `name` (their log prefix): building the binaries, free
# loopback ports, and a temporary directory whose processes are stopped on exit.
#
#   bench_build smartfeeds smartfeeds-load   # unless BENCH_SKIP_BUILD=1
#   bench_tmp                                # sets tmp and token; on exit stops sf_pid and pids, removes tmp
#   bench_start_smartfeeds DB [HTTP_LINES]   # sets sf_pid, http, metrics, base

log() { printf '%s: %s\n' "$name" "$*" >&2; }

# Builds these binaries with the profiling profile (release with symbols) into target/profiling,
# unless BENCH_SKIP_BUILD=1 (then they are used as they are).
bench_build() {
	if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
		log "building $* (profile profiling: release with symbols)"
		cargo build --profile profiling --quiet $(printf -- '--bin %s ' "$@")
	fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A temporary directory in `tmp`; on exit (also on error or ctrl-c) the processes in `pids`
# are killed, smartfeeds (`sf_pid`) is stopped and waited for, and the directory removed.
bench_tmp() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/smartfeeds-$name-XXXXXX")
	token="bench-token-$$-$RANDOM$RANDOM"
	pids=()
	sf_pid=""
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

bench_cleanup() {
	local status=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[ -z "$sf_pid" ] || kill -TERM "$sf_pid" 2>/dev/null || true
	[ -z "$sf_pid" ] || wait "$sf_pid" 2>/dev/null || true
	rm -rf "$tmp"
	exit "$status"
}

# Starts smartfeeds (`$smartfeeds`) on the SQLite database $1, with [http] and [metrics] on
# free loopback ports, the lines $2 added to [http], and an admin's token (`token`, so the
# rate limit does not apply); no XMPP server is needed (the component link retries in the
# background). Sets sf_pid, http, metrics and base once it answers; exits if it does not.
bench_start_smartfeeds() {
	http=$(free_port)
	metrics=$(free_port)
	base=http://127.0.0.1:$http
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
		${2:-}
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
		curl -fs "$base/health" >/dev/null 2>&1 && return
		sleep 0.1
	done
	log "smartfeeds did not answer on its HTTP port:"
	tail -n 20 "$tmp/smartfeeds.log" >&2
	exit 1
}

bench_stop_smartfeeds() {
	kill -TERM "$sf_pid" 2>/dev/null || true
	wait "$sf_pid" 2>/dev/null || true
	sf_pid=""
}
