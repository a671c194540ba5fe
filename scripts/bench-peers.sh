#!/usr/bin/env bash
# smartfeeds side by side with the pubsub built into Prosody 0.12 and ejabberd 23.01.
#
# Usage: scripts/bench-peers.sh
#
# For each host (Prosody, then ejabberd) it starts a private instance on free loopback
# ports in a temporary directory, and smartfeeds as feeds.localhost on it; the load tool
# (smartfeeds-load) connects as the component bench.localhost, so no client logins are
# needed. The services measured:
#   prosody   smartfeeds            feeds.localhost        RSM pages, durable publishes; pushes
#                                                          through the host's XEP-0033 multicast
#                                                          service (multicast.localhost)
#             smartfeeds(unicast)   feeds.localhost        the same with push.multicast = false:
#                                                          one push message per subscriber
#             mod_pubsub (file)     pubsub.localhost       Prosody's file store
#             mod_pubsub (memory)   pubsub-mem.localhost   Prosody's memory store (not durable)
#   prosody-defaults        the same three, with Prosody's network defaults (prosody/start.sh's
#                           PROSODY_NETWORK_DEFAULTS=1: 4 KiB reads, Nagle on); not run
#                           unless named in BENCH_HOSTS
#   ejabberd  smartfeeds            feeds.localhost        (mod_multicast)
#             smartfeeds(unicast)   feeds.localhost
#             mod_pubsub            pubsub.localhost       Mnesia (not fsynced)
#   both      libervia-pubsub       libervia.localhost     with BENCH_STORES holding postgres:
#                                                          the Debian package, storing in the
#                                                          same PostgreSQL as smartfeeds-pg
# and on each host canned: `smartfeeds-load canned` as the component canned.localhost, a
# service that answers every items request with one page (smartfeeds' first page of the node,
# written by smartfeeds' own writer) and does nothing else, the baseline of pulls through
# the host: pull only (its figures beside smartfeeds' say what the server in front leaves
# of it); CPU per page is that of the canned component. Before the rounds the node gets
# BENCH_PUBLISH_ITEMS entries (not measured), so that there is a page; then the canned
# component captures it. Pulls of smartfeeds and canned only,
# alternately: BENCH_SERVICES='(smartfeeds|canned) ' BENCH_MODES=pull.
# And on each host smartfeeds(MAM): the same instance and pages, asked as MAM queries
# (XEP-0313 with the node; pull only): its CPU per page beside smartfeeds' is what a MAM
# page costs against an RSM page of the same view, in the same run.
# And on each host smartfeeds-http: the same smartfeeds instance through its HTTP face (no
# XMPP server in the middle): publishes by PUT, pages by `since`, the same node and sizes.
# smartfeeds is restarted with the other push.multicast setting between its two services
# (the same database).
# Prosody 0.12's pubsub ignores RSM, so its pages are asked with max_items (the 50 newest
# items: the one page it can serve).
#
# Each round runs, for every service of a host in turn: publish, pull, fan-out. After all
# rounds the hosts' JSON lines go through `smartfeeds-load compare`: medians, spread and the
# ratios ours / theirs.
#
# Environment (defaults in brackets):
#   BENCH_HOSTS              hosts to run ["prosody ejabberd"]
#   BENCH_SERVICES           only services whose name matches this regex [all]
#   BENCH_ROUNDS             rounds per host [3]
#   BENCH_MODES              load modes to run, in this order ["publish pull fanout"]
#   BENCH_STORES             smartfeeds' stores to compare ["sqlite"]; add "postgres" (one
#                            instance on a private PostgreSQL, service smartfeeds-pg; pgbench
#                            runs a publish-shaped transaction there first, and
#                            libervia-pubsub, the other external pubsub component, runs on
#                            the same PostgreSQL as libervia.localhost) and
#                            "postgres2" (two instances on one database, smartfeeds-pg2;
#                            ejabberd only: Prosody takes one connection per component, the
#                            second would stand by). CPU is that of the first instance.
#   BENCH_PUBLISH_ITEMS      entries per publish run [2000]
#   BENCH_PUBLISH_IN_FLIGHT  publishes in flight [64]
#   BENCH_PUBLISH_NODES      smartfeeds' publishes spread over this many feeds, bench-0 …
#                            (created by the first publish), instead of all to one [1]: many
#                            feeds written at once, as against one hot feed
#   BENCH_PULL_PAGES         pages per pull run [2000]
#   BENCH_PULL_MAX           items per page [50]
#   BENCH_PULL_IN_FLIGHT     page requests in flight [32]
#   BENCH_FANOUT_SUBSCRIBERS subscribers per fan-out run [10000]
#   BENCH_FANOUT_PUBLISHES   publishes per fan-out run, one at a time [20]
#   BENCH_FANOUT_PUBLISHER   "apart": publish through a second component connection
#                            (publisher.localhost), not the subscribers' own [same]
#   BENCH_FANOUT_RECEIVERS   connections the notifications arrive over [1]; above 1 needs
#                            BENCH_FANOUT_PUBLISHER=apart and a host that spreads a
#                            component's messages over its connections (ejabberd only)
#   BENCH_FANOUT_SESSIONS=1  the subscribers are client sessions of the host (anonymous
#                            logins on its c2s port, one connection each) instead of JIDs
#                            of bench.localhost; publishes go through bench.localhost
#                            (not with BENCH_FANOUT_PUBLISHER or BENCH_FANOUT_RECEIVERS)
#   BENCH_DURATION           cap in seconds on each run [300]
#   BENCH_OUT                also append the JSON lines to this file [none]
#   BENCH_KEEP=1             keep the temporary directory (logs, databases)
#   BENCH_SKIP_BUILD=1       use the binaries in target/profiling as they are
#   BENCH_SMARTFEEDS         the smartfeeds binary to measure [target/profiling/smartfeeds]
#                            (another build, say the commit before a change, against the
#                            same load tool and servers)
#
# Needs: prosody and ejabberd (Debian packages), cargo; with postgres, postgresql and
# libervia-pubsub. Everything listens on 127.0.0.1
# only. The processes started here are stopped on exit, also on error or ctrl-c.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

hosts=${BENCH_HOSTS:-prosody ejabberd}
only=${BENCH_SERVICES:-.}
rounds=${BENCH_ROUNDS:-3}
modes=${BENCH_MODES:-publish pull fanout}
stores=${BENCH_STORES:-sqlite}
duration=${BENCH_DURATION:-300}
publish_items=${BENCH_PUBLISH_ITEMS:-2000}
publish_in_flight=${BENCH_PUBLISH_IN_FLIGHT:-64}
publish_nodes=${BENCH_PUBLISH_NODES:-1}
pull_pages=${BENCH_PULL_PAGES:-2000}
pull_max=${BENCH_PULL_MAX:-50}
pull_in_flight=${BENCH_PULL_IN_FLIGHT:-32}
fanout_subscribers=${BENCH_FANOUT_SUBSCRIBERS:-10000}
fanout_publishes=${BENCH_FANOUT_PUBLISHES:-20}
case "${BENCH_FANOUT_PUBLISHER:-same}" in
	same) publisher=() ;;
	apart) publisher=(--publisher publisher.localhost) ;;
	*) echo "BENCH_FANOUT_PUBLISHER: same or apart" >&2; exit 2 ;;
esac
fanout_receivers=${BENCH_FANOUT_RECEIVERS:-1}
fanout_sessions=${BENCH_FANOUT_SESSIONS:-0}
if [ "$fanout_sessions" = 1 ] && { [ ${#publisher[@]} != 0 ] || [ "$fanout_receivers" != 1 ]; }; then
	echo "BENCH_FANOUT_SESSIONS=1 publishes through bench.localhost: no BENCH_FANOUT_PUBLISHER or _RECEIVERS" >&2
	exit 2
fi

log() { printf 'bench-peers: %s\n' "$*" >&2; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Sets the variable named $1 to a free port that no other port of this run took, below the
# kernel's ephemeral range: a run of thousands of client sessions leaves as many closed
# connections on ephemeral ports (TIME_WAIT), and a server cannot listen on one of those.
taken=" "
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((10000 + RANDOM % (ephemeral_low - 10000)))
		if [[ $taken != *" $p "* ]] && ! port_in_use "$p"; then
			taken="$taken$p "
			printf -v "$1" '%s' "$p"
			return
		fi
	done
	log "no free port found"
	exit 1
}

# Waits up to $2 seconds for a TCP port to accept connections.
wait_port() {
	local deadline=$((SECONDS + $2))
	until port_in_use "$1"; do
		if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
		sleep 0.1
	done
}

for host in $hosts; do
	case "$host" in
		prosody | prosody-defaults) command -v prosody >/dev/null || { log "prosody not found: apt-get install prosody"; exit 1; } ;;
		ejabberd) command -v ejabberdctl >/dev/null || [ -x /usr/sbin/ejabberdctl ] \
			|| { log "ejabberdctl not found: apt-get install ejabberd"; exit 1; } ;;
		*) log "unknown host '$host' (prosody, prosody-defaults, ejabberd)"; exit 2 ;;
	esac
done

if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
	log "building the binaries (profile profiling: release with symbols)"
	cargo build --profile profiling --quiet --bin smartfeeds --bin smartfeeds-load
fi
smartfeeds=${BENCH_SMARTFEEDS:-$repo/target/profiling/smartfeeds}
load=$repo/target/profiling/smartfeeds-load

tmp=$(mktemp -d "${TMPDIR:-/tmp}/smartfeeds-peers-XXXXXX")
chmod 755 "$tmp" # ejabberd runs as its own user and must reach its run directory
results=$tmp/results.jsonl
: >"$results"
sf_pid=""
sf_pid2=""
sf_multicast=""
sf_store=""
pg_bin=""
pg_port=""
server_pid=""
stop_server=""
canned_pid=""
lp_pid=""

# Stops the smartfeeds instances (SIGTERM, then SIGKILL after 10 s).
stop_smartfeeds() {
	for pid in $sf_pid $sf_pid2; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	sf_pid=""
	sf_pid2=""
	sf_multicast=""
	sf_store=""
}

# Runs a PostgreSQL tool as the postgres user (PostgreSQL refuses root).
as_postgres() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# Starts a private PostgreSQL (durable defaults) in $tmp/pg on a free port; sets pg_bin, pg_port.
start_postgres() {
	pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	[ -x "$pg_bin/initdb" ] || { log "PostgreSQL not found: apt-get install postgresql"; exit 1; }
	free_port pg_port
	mkdir -p "$tmp/pg"
	[ "$(id -u)" = 0 ] && chown postgres "$tmp/pg"
	as_postgres "$pg_bin/initdb" -D "$tmp/pg/data" -A trust -U postgres -E UTF8 --locale=C >"$tmp/pg-initdb.log" 2>&1 \
		|| { cat "$tmp/pg-initdb.log" >&2; exit 1; }
	as_postgres "$pg_bin/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/server.log" -w \
		-o "-p $pg_port -k $tmp/pg -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null \
		|| { cat "$tmp/pg/server.log" >&2; exit 1; }
	log "PostgreSQL on 127.0.0.1:$pg_port"
}

# pgbench on the same server, with a transaction shaped like one publish
# (scripts/pgbench-publish.sql), from one client and from 16 on one feed: the floor that one
# commit per publish sets, to read smartfeeds-pg's figures against.
pgbench_publish() {
	as_postgres "$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -c "CREATE DATABASE pgbench" >/dev/null
	as_postgres "$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -d pgbench >/dev/null <<-'SQL'
		CREATE TABLE bench_feeds (id bigint PRIMARY KEY, items bigint NOT NULL);
		INSERT INTO bench_feeds VALUES (1, 0);
		CREATE TABLE bench_items (feed bigint NOT NULL, id text NOT NULL, payload text, PRIMARY KEY (feed, id));
		CREATE TABLE bench_push_log (seq bigserial PRIMARY KEY, feed bigint NOT NULL, item_id text, payload text);
	SQL
	local clients tps
	for clients in 1 16; do
		tps=$(as_postgres "$pg_bin/pgbench" -n -h 127.0.0.1 -p "$pg_port" -U postgres -c "$clients" -j 1 -T 10 \
			-f "$repo/scripts/pgbench-publish.sql" pgbench 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
		echo "# pgbench, one publish per transaction on one feed, $clients client(s): ${tps:-?} per second"
	done
}

stop_postgres() {
	[ -z "$pg_port" ] || as_postgres "$pg_bin/pg_ctl" -D "$tmp/pg/data" -m fast -w stop >/dev/null 2>&1 || true
	pg_port=""
}

# Stops the canned component (its report of what it answered goes to $tmp/canned.jsonl).
stop_canned() {
	if [ -n "$canned_pid" ]; then
		kill -TERM "$canned_pid" 2>/dev/null || true
		wait "$canned_pid" 2>/dev/null || true
	fi
	canned_pid=""
}

# Starts the canned component on the current server once smartfeeds' node has a page
# (BENCH_PUBLISH_ITEMS entries are published into it first, not measured).
start_canned() {
	local host=$1
	log "$host: $publish_items entries into smartfeeds' node for the canned page (not measured)"
	"$load" publish --server "127.0.0.1:$component_port" --component bench.localhost --secret "$secret" \
		--service feeds.localhost --node bench --items "$publish_items" --in-flight "$publish_in_flight" \
		--duration "$duration" >>"$tmp/fill.jsonl" 2>"$tmp/fill.err" || { tail -n 5 "$tmp/fill.err" >&2; exit 1; }
	"$load" canned --server "127.0.0.1:$component_port" --component canned.localhost --secret "$secret" \
		--service feeds.localhost --node bench --max "$pull_max" --duration 86400 --label "$host/canned" \
		>>"$tmp/canned.jsonl" 2>"$tmp/canned-$host.err" &
	canned_pid=$!
	for _ in $(seq 1 100); do
		grep -q "serving" "$tmp/canned-$host.err" && return
		kill -0 "$canned_pid" 2>/dev/null || break
		sleep 0.1
	done
	log "the canned component did not start:"
	cat "$tmp/canned-$host.err" >&2
	exit 1
}

# Starts libervia-pubsub as libervia.localhost on the current server, storing in a fresh
# database of the private PostgreSQL (its own schema); sets lp_pid. Debian ships no
# `twistd`: `python3 -m twisted` runs the plugin in the foreground. PYTHONPATH holds
# sat_pubsub and its patched wokkel; PG* variables would override its settings.
start_libervia() {
	local host=$1 name="lp_${1//-/_}" logf="$tmp/libervia-$1.log"
	[ -f /usr/share/libervia/sat_pubsub/db/pubsub.sql ] \
		|| { log "libervia-pubsub not found: apt-get install libervia-pubsub"; exit 1; }
	as_postgres "$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres \
		-c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
	as_postgres "$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -d "$name" \
		-f /usr/share/libervia/sat_pubsub/db/pubsub.sql >/dev/null
	mkdir -p "$tmp/libervia-$host"
	(cd "$tmp/libervia-$host" && exec env -u PGUSER -u PGDATABASE -u PGPASSWORD -u PGHOST -u PGPORT \
		PYTHONPATH=/usr/share/libervia /usr/bin/python3 -m twisted --log-format=text --log-level=warn \
		libervia-pubsub --jid libervia.localhost --xmpp_pwd "$secret" --rhost 127.0.0.1 --rport "$component_port" \
		--backend pgsql --db_name "$name" --db_user postgres --db_host 127.0.0.1 --db_port "$pg_port" \
		>"$logf" 2>&1) &
	lp_pid=$!
	# Connected once it answers: the node's creation (run below) is the probe.
	for _ in $(seq 1 100); do
		if "$load" create --server "127.0.0.1:$component_port" --component bench.localhost --secret "$secret" \
			--service libervia.localhost --node probe --max-items 1 >/dev/null 2>&1; then
			log "libervia-pubsub on $host (database $name)"
			return
		fi
		kill -0 "$lp_pid" 2>/dev/null || break
		sleep 0.2
	done
	log "libervia-pubsub did not start:"
	cat "$logf" >&2
	exit 1
}

stop_libervia() {
	if [ -n "$lp_pid" ]; then
		kill -TERM "$lp_pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$lp_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$lp_pid" 2>/dev/null || true
	fi
	lp_pid=""
}

# Stops smartfeeds, the canned component, libervia-pubsub and the current server.
stop_all() {
	stop_canned
	stop_libervia
	stop_smartfeeds
	if [ -n "$stop_server" ]; then
		$stop_server >/dev/null 2>&1 || true
	fi
	if [ -n "$server_pid" ]; then
		# Both servers linger a little after their shutdown work; do not wait long.
		for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$server_pid" 2>/dev/null || true
	fi
	server_pid=""
	stop_server=""
}
cleanup() {
	local status=$?
	stop_all
	stop_postgres
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		log "kept $tmp"
	else
		rm -rf "$tmp"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

secret="bench-$$-$RANDOM"

# Starts Prosody in $tmp/$host; sets c2s, session_domain (its anonymous
# logins), component_port, server_pid, stop_server.
start_prosody() {
	local dir=$tmp/$host
	free_port c2s
	session_domain=anon.localhost
	free_port component_port
	log "starting Prosody (c2s $c2s, components $component_port) in $dir"
	PROSODY_RUN_DIR=$dir PROSODY_C2S_PORT=$c2s PROSODY_COMPONENT_PORT=$component_port PROSODY_ANONYMOUS=$fanout_sessions \
		PROSODY_SECRET=$secret PROSODY_LOG_LEVEL=warn "$repo/prosody/start.sh" --background >"$tmp/prosody-start.out"
	if ! wait_port "$component_port" 15; then
		log "Prosody did not come up:"
		tail -n 30 "$dir/prosody.log" >&2 || true
		exit 1
	fi
	for _ in $(seq 1 50); do
		server_pid=$(cat "$dir/prosody.pid" 2>/dev/null || true)
		[ -n "$server_pid" ] && break
		sleep 0.1
	done
	stop_server="env PROSODY_RUN_DIR=$dir $repo/prosody/start.sh --stop"
}

# Prosody with its own network settings instead of the ones prosody/ uses.
start_prosody-defaults() {
	PROSODY_NETWORK_DEFAULTS=1 start_prosody
}

# Starts ejabberd in $tmp/ejabberd; sets c2s, session_domain (its anonymous logins),
# component_port, server_pid, stop_server.
start_ejabberd() {
	local dir=$tmp/ejabberd api dist
	free_port c2s
	session_domain=localhost
	free_port component_port
	free_port api
	free_port dist
	log "starting ejabberd (components $component_port) in $dir"
	EJABBERD_RUN_DIR=$dir EJABBERD_C2S_PORT=$c2s EJABBERD_COMPONENT_PORT=$component_port \
		EJABBERD_API_PORT=$api EJABBERD_DIST_PORT=$dist \
		EJABBERD_NODE="smartfeeds_bench_$$@localhost" EJABBERD_SECRET=$secret EJABBERD_LOG_LEVEL=warning \
		EJABBERD_ANONYMOUS=$fanout_sessions \
		"$repo/ejabberd/start.sh" --background >"$tmp/ejabberd-start.out" 2>&1 || {
		log "ejabberd did not come up:"
		cat "$tmp/ejabberd-start.out" >&2
		exit 1
	}
	server_pid=$(cat "$dir/ejabberd.pid" 2>/dev/null || pgrep -f "beam.*smartfeeds_bench_$$@localhost" | head -n 1)
	stop_server="env EJABBERD_RUN_DIR=$dir $repo/ejabberd/start.sh --stop"
}

# Starts smartfeeds as feeds.localhost on the current server, with push.multicast = $2
# (true or false) on store $3 (sqlite, postgres: one instance, postgres2: two instances on
# one database); sets sf_pid (sf_pid2), sf_multicast and sf_store. Waits until each has
# looked for the multicast service (or, with false, until it is connected).
start_smartfeeds() {
	local host=$1 multicast=$2 store=$3 ready="connected" n=1 db
	[ "$multicast" = true ] && ready="multicast service"
	case "$store" in
		sqlite) db="path = \"$tmp/smartfeeds-$host.db\"" ;;
		postgres*)
			local name="sf_${host//-/_}_$store"
			as_postgres "$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres \
				-c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
			db="url = \"postgres://postgres@127.0.0.1:$pg_port/$name\""
			[ "$store" = postgres2 ] && n=2
			;;
	esac
	sf_pid2=""
	for i in $(seq 1 "$n"); do
		local conf="$tmp/smartfeeds-$host-$i.toml" logf="$tmp/smartfeeds-$host.log" port
		[ "$i" = 1 ] || logf="$tmp/smartfeeds-$host-$i.log"
		touch "$logf"
		free_port port
		[ "$i" = 1 ] && http_port=$port
		cat >"$conf" <<-EOF
			# Generated by scripts/bench-peers.sh. bench.localhost and publisher.localhost (the load
			# tool) are admins, so they may publish anywhere; the "bench" feed exists from the
			# start, so any workload may come first.
			admins = ["admin@localhost", "bench.localhost", "publisher.localhost"]
			autocreate = true

			[component]
			jid = "feeds.localhost"
			secret = "$secret"
			server = "127.0.0.1:$component_port"

			[store]
			$db

			[push]
			multicast = $multicast

			[http]
			listen = "127.0.0.1:$port"
			[[http.tokens]]
			jid = "bench.localhost"
			token = "$secret-http-token"

			[[feeds]]
			name = "bench"
		EOF
		"$smartfeeds" check-config --config "$conf" >/dev/null
		local from pid
		from=$(wc -l <"$logf")
		RUST_LOG=${RUST_LOG:-info} "$smartfeeds" --config "$conf" 2>>"$logf" &
		pid=$!
		if [ "$i" = 1 ]; then sf_pid=$pid; else sf_pid2=$pid; fi
		# ejabberd routes the answers to an instance's discovery to any instance of the
		# domain: a second instance finds the multicast service once one of its repeated
		# queries is answered to it; wait for its login only.
		[ "$i" = 1 ] || ready="connected"
		local up=""
		for _ in $(seq 1 150); do
			tail -n +"$((from + 1))" "$logf" | grep -q "$ready" && { up=1; break; }
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if [ -z "$up" ]; then
			log "smartfeeds did not connect:"
			cat "$logf" >&2
			exit 1
		fi
	done
	sf_multicast=$multicast
	sf_store=$store
}

# Runs one load mode against one service; its JSON line goes to $results.
#   run HOST/NAME JID MODE ARGS...
run() {
	local label=$1 service=$2 mode=$3
	shift 3
	local pids=(--server-pid "$server_pid") target
	[[ ${label#*/} == smartfeeds* ]] && pids+=(--service-pid "$sf_pid")
	[[ ${label#*/} == canned ]] && pids+=(--service-pid "$canned_pid")
	[[ ${label#*/} == libervia-pubsub ]] && pids+=(--service-pid "$lp_pid")
	if [[ $mode == http-* ]]; then
		target=(--base "http://127.0.0.1:$http_port" --token "$secret-http-token" --feed bench)
	else
		target=(--server "127.0.0.1:$component_port" --component bench.localhost --secret "$secret"
			--service "$service" --node bench)
	fi
	log "$label: $mode $*"
	if ! timeout $((duration * 3 + 60)) "$load" "$mode" "${target[@]}" \
		--duration "$duration" --label "$label" "${pids[@]}" "$@" >>"$results" 2>"$tmp/last-run.err"; then
		log "$label: $mode failed:"
		tail -n 5 "$tmp/last-run.err" >&2
	fi
}

# The services of a host: NAME JID PAGING (rsm, max-items, mam: the same pages as MAM
# queries, or http: smartfeeds' HTTP face)
# MAX_ITEMS (node size for create; 0 for smartfeeds, which keeps every item and needs no
# node creation).
services_of() {
	case "$1" in
		prosody | prosody-defaults)
			echo "smartfeeds feeds.localhost rsm 0"
			[[ " $stores " == *" postgres "* ]] && echo "smartfeeds-pg feeds.localhost rsm 0"
			echo "smartfeeds-http - http 0"
			echo "smartfeeds(unicast) feeds.localhost rsm 0"
			echo "smartfeeds(MAM) feeds.localhost mam 0"
			# Prosody's pubsub keeps at most 256 items per node (pubsub_max_items).
			echo "mod_pubsub(file) pubsub.localhost max-items 256"
			echo "mod_pubsub(memory) pubsub-mem.localhost max-items 256"
			[[ " $stores " == *" postgres "* ]] && echo "libervia-pubsub libervia.localhost rsm 100000"
			echo "canned canned.localhost rsm 0"
			;;
		ejabberd)
			echo "smartfeeds feeds.localhost rsm 0"
			[[ " $stores " == *" postgres "* ]] && echo "smartfeeds-pg feeds.localhost rsm 0"
			[[ " $stores " == *" postgres2 "* ]] && echo "smartfeeds-pg2 feeds.localhost rsm 0"
			echo "smartfeeds-http - http 0"
			echo "smartfeeds(unicast) feeds.localhost rsm 0"
			echo "smartfeeds(MAM) feeds.localhost mam 0"
			echo "mod_pubsub pubsub.localhost rsm 1000"
			[[ " $stores " == *" postgres "* ]] && echo "libervia-pubsub libervia.localhost rsm 100000"
			echo "canned canned.localhost rsm 0"
			;;
	esac
}

if [[ " $stores " == *" postgres"* ]]; then
	start_postgres
	pgbench_line=$(pgbench_publish)
fi
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
for host in $hosts; do
	"start_$host"
	if [ "$fanout_sessions" = 1 ]; then
		subscribers=(--sessions "127.0.0.1:$c2s" --session-domain "$session_domain")
	else
		subscribers=("${publisher[@]}" --receivers "$fanout_receivers")
	fi
	: >"$tmp/smartfeeds-$host.log"
	start_smartfeeds "$host" true sqlite
	mapfile -t services < <(services_of "$host" | grep -E -- "^[^ ]*($only)")
	if printf '%s\n' "${services[@]}" | grep -q '^libervia-pubsub '; then
		start_libervia "$host"
	fi
	for s in "${services[@]}"; do
		read -r name jid paging max_items <<<"$s"
		if [ "$max_items" != 0 ]; then
			run "$host/$name" "$jid" create --max-items "$max_items"
		fi
		if [ "$name" = canned ] && [[ " $modes " == *" pull "* ]]; then
			start_canned "$host"
		fi
	done
	for round in $(seq 1 "$rounds"); do
		log "$host: round $round of $rounds"
		for s in "${services[@]}"; do
			read -r name jid paging max_items <<<"$s"
			headers=(--without-headers)
			case "$name" in
				smartfeeds) want="true sqlite" headers=() ;;
				smartfeeds\(unicast\)) want="false sqlite" headers=() ;;
				smartfeeds\(MAM\)) want="true sqlite" headers=() ;;
				smartfeeds-pg) want="true postgres" headers=() ;;
				smartfeeds-pg2) want="true postgres2" headers=() ;;
				*) want="" ;;
			esac
			if [ -n "$want" ] && [ "$want" != "$sf_multicast $sf_store" ]; then
				stop_smartfeeds
				start_smartfeeds "$host" $want
			fi
			for mode in $modes; do
				# The canned component and MAM answer pulls only.
				if [[ $name == canned || $name == "smartfeeds(MAM)" ]] && [ "$mode" != pull ]; then continue; fi
				case "$paging/$mode" in
					http/publish) run "$host/$name" "$jid" http-publish --items "$publish_items" \
						--in-flight "$publish_in_flight" ;;
					http/pull) run "$host/$name" "$jid" http-pull --pages "$pull_pages" --max "$pull_max" \
						--in-flight "$pull_in_flight" ;;
					http/fanout) ;; # pushes over HTTP are long-polls and WebSub: scripts/bench-http.sh, bench-websub.sh
					*/publish)
						spread=()
						[[ $name == smartfeeds* ]] && spread=(--nodes "$publish_nodes")
						run "$host/$name" "$jid" publish --items "$publish_items" --in-flight "$publish_in_flight" "${spread[@]}"
						;;
					*/pull) run "$host/$name" "$jid" pull --pages "$pull_pages" --max "$pull_max" \
						--in-flight "$pull_in_flight" "--$paging" ;;
					*/fanout) run "$host/$name" "$jid" fanout --subscribers "$fanout_subscribers" \
						--publishes "$fanout_publishes" --in-flight 64 "${headers[@]}" "${subscribers[@]}" ;;
					*) log "unknown mode '$mode' (publish, pull, fanout)"; exit 2 ;;
				esac
			done
		done
	done
	if ! kill -0 "$sf_pid" 2>/dev/null; then
		log "smartfeeds on $host is no longer running"
	fi
	warnings=$(grep -E "WARN|ERROR" "$tmp/smartfeeds-$host.log" | tail -n 10 || true)
	[ -z "$warnings" ] || printf '# smartfeeds on %s: warnings and errors\n%s\n' "$host" "$warnings" >&2
	stop_all
done

if [ -n "${BENCH_OUT:-}" ]; then
	cat "$results" >>"$BENCH_OUT"
fi
if [ -s "$tmp/canned.jsonl" ]; then
	echo "# the canned component, over its whole life (every page it answered, its CPU):"
	"$load" table "$tmp/canned.jsonl"
fi
echo "# $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1); load average at start: $load_at_start, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[ -z "${pgbench_line:-}" ] || echo "$pgbench_line"
echo "# prosody $(dpkg-query -W -f='${Version}' prosody 2>/dev/null || echo '?'), ejabberd $(dpkg-query -W -f='${Version}' ejabberd 2>/dev/null || echo '?'); $rounds rounds"
echo "# publish: $publish_items entries, $publish_in_flight in flight, over $publish_nodes feed(s) (smartfeeds); pull: $pull_pages pages of $pull_max, $pull_in_flight in flight; fan-out: $fanout_subscribers subscribers x $fanout_publishes publishes, publisher ${BENCH_FANOUT_PUBLISHER:-same}, $fanout_receivers receiving connection(s), client sessions: $fanout_sessions"
"$load" compare "$results"
