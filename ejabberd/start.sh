#!/bin/bash
# Start a private ejabberd 23.01 for the smartfeeds demo, from ejabberd/ejabberd.yml and
# ejabberd/ejabberdctl.cfg (the same templates the tests use).
#
# Usage: ejabberd/start.sh [--background|-b] [--stop]
#
#   (no option)   run attached: ctrl-c (or SIGTERM) stops ejabberd cleanly
#   --background  start it as a daemon and return once it is ready
#   --stop        stop the instance of the run directory (ejabberdctl stop)
#
# Environment (defaults in brackets):
#   EJABBERD_RUN_DIR         run directory: configs, logs/, spool/ (Mnesia) [./run/ejabberd]
#   EJABBERD_C2S_PORT        client port [5222]
#   EJABBERD_COMPONENT_PORT  XEP-0114 component port [5347]
#   EJABBERD_API_PORT        REST API (mod_http_api), loopback only [5281]
#   EJABBERD_DIST_PORT       Erlang distribution port of the node (no epmd is used) [5290]
#   EJABBERD_NODE            Erlang node name [ejabberd_smartfeeds@localhost]
#   EJABBERD_SECRET          secret of the external components [secret]
#   EJABBERD_LOG_LEVEL       debug, info, warning, error [info]
#   EJABBERD_ANONYMOUS=1     also take SASL ANONYMOUS logins on localhost (a session with
#                            a made-up name, gone when it ends): the load tool's client
#                            sessions (smartfeeds-load fanout --sessions) [off]
#
# Demo accounts (created or reset on every start), all with the password "password"
# (the test harness creates the same ones):
#   admin@localhost   global admin of smartfeeds (admins = ["admin@localhost"])
#   bot@localhost     a feed publisher
#   alice@localhost   a reader
#   bob@localhost     another reader
# Components: feeds.localhost, bench.localhost, publisher.localhost, canned.localhost and
# libervia.localhost (external, secret above), pubsub.localhost (ejabberd's mod_pubsub).
#
# Run as root, ejabberdctl runs the node as the `ejabberd` user, so the run directory is
# handed to that user. Other ejabberdctl commands work on this instance with
#   ejabberdctl --config-dir RUN_DIR COMMAND …   (e.g. registered_users localhost)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/server-args.sh"

ctl=$(command -v ejabberdctl || true)
[ -n "$ctl" ] || [ ! -x /usr/sbin/ejabberdctl ] || ctl=/usr/sbin/ejabberdctl
if [ -z "$ctl" ]; then
	echo "ejabberdctl not found: install the Debian package with 'apt-get install ejabberd'" >&2
	exit 1
fi

run_dir=${EJABBERD_RUN_DIR:-./run/ejabberd}
mkdir -p "$run_dir"
run_dir=$(cd "$run_dir" && pwd)
case "$run_dir" in
	*[!A-Za-z0-9/._-]*) echo "run directory '$run_dir' must not need quoting (ejabberdctl.cfg)" >&2; exit 2 ;;
esac

if [ "$stop" = 1 ]; then
	if [ -f "$run_dir/ejabberdctl.cfg" ] && "$ctl" --config-dir "$run_dir" stop >/dev/null 2>&1; then
		echo "stopped ejabberd ($run_dir)"
	else
		echo "ejabberd is not running (no node answers for $run_dir)"
	fi
	exit 0
fi

c2s_port=${EJABBERD_C2S_PORT:-5222}
component_port=${EJABBERD_COMPONENT_PORT:-5347}
api_port=${EJABBERD_API_PORT:-5281}
dist_port=${EJABBERD_DIST_PORT:-5290}
node=${EJABBERD_NODE:-ejabberd_smartfeeds@localhost}
secret=${EJABBERD_SECRET:-secret}
log_level=${EJABBERD_LOG_LEVEL:-info}

# One cookie per run directory, kept, so that --stop and ejabberdctl reach a running node.
if [ ! -s "$run_dir/cookie" ]; then
	(umask 077; od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$run_dir/cookie")
fi
cookie=$(cat "$run_dir/cookie")

# Fill in the templates. '|' is the sed delimiter, so it may not appear in the values.
sed -e "s|@C2S_PORT@|$c2s_port|g" \
    -e "s|@COMPONENT_PORT@|$component_port|g" \
    -e "s|@API_PORT@|$api_port|g" \
    -e "s|@SECRET@|$secret|g" \
    -e "s|@LOG_LEVEL@|$log_level|g" \
    "$here/ejabberd.yml" > "$run_dir/ejabberd.yml"
if [ "${EJABBERD_ANONYMOUS:-0}" = 1 ]; then
	sed -i -e 's|^auth_method: internal$|auth_method: [internal, anonymous]\nanonymous_protocol: sasl_anon|' \
		"$run_dir/ejabberd.yml"
	grep -q '^anonymous_protocol: sasl_anon$' "$run_dir/ejabberd.yml" \
		|| { echo "EJABBERD_ANONYMOUS: no 'auth_method: internal' line in ejabberd.yml" >&2; exit 1; }
fi
sed -e "s|@NODE@|$node|g" \
    -e "s|@DIST_PORT@|$dist_port|g" \
    -e "s|@COOKIE@|$cookie|g" \
    -e "s|@DATA@|$run_dir|g" \
    "$here/ejabberdctl.cfg" > "$run_dir/ejabberdctl.cfg"
printf '{lookup,["file","native"]}.\n{host,{127,0,0,1},["localhost"]}.\n' > "$run_dir/inetrc"
mkdir -p "$run_dir/logs" "$run_dir/spool"
if [ "$(id -u)" = 0 ]; then
	chown -R ejabberd:ejabberd "$run_dir"
fi

ejabberdctl() { "$ctl" --config-dir "$run_dir" "$@"; }

# Runs the node itself. As root, ejabberdctl switches to the ejabberd user through su, whose
# PAM session puts the open-file limit back to 1024: too few for a few thousand clients
# ("Failed TCP accept: too many open files"). setpriv switches without PAM and keeps this
# shell's limit, raised to its hard limit first.
run_node() {
	ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
	if [ "$(id -u)" = 0 ]; then
		HOME=$run_dir setpriv --reuid=ejabberd --regid=ejabberd --init-groups "$ctl" --config-dir "$run_dir" "$@"
	else
		ejabberdctl "$@"
	fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Waits until the c2s, component and API ports accept connections (60 s at most) while
# ejabberdctl (pid $1) runs.
wait_ready() {
	for _ in $(seq 600); do
		if port_open "$c2s_port" && port_open "$component_port" && port_open "$api_port"; then
			return 0
		fi
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	echo "ejabberd did not come up; $run_dir/ejabberd.out ends with:" >&2
	tail -n 20 "$run_dir/ejabberd.out" >&2 || true
	kill "$1" 2>/dev/null || true
	return 1
}

# In parallel: each ejabberdctl call boots an Erlang VM (about a second).
create_users() {
	local pids="" p
	for user in admin bot alice bob; do
		( ejabberdctl register "$user" localhost password >/dev/null 2>&1 \
			|| ejabberdctl change_password "$user" localhost password >/dev/null ) &
		pids="$pids $!"
	done
	for p in $pids; do wait "$p"; done
}

banner() {
	echo "ejabberd: c2s 127.0.0.1:$c2s_port, components feeds.localhost and bench.localhost on 127.0.0.1:$component_port (secret '$secret')"
	echo "ejabberd: node $node (distribution port $dist_port), run dir $run_dir, log $run_dir/logs/ejabberd.log"
}

# ejabberdctl runs the node attached, its output (the log, and what the VM prints before
# its logger runs, e.g. "eaddrinuse" for a taken distribution port) in ejabberd.out.
if [ "$background" = 1 ]; then
	(trap "" HUP; run_node foreground) >"$run_dir/ejabberd.out" 2>&1 &
	pid=$!
	wait_ready "$pid" || exit 1
	create_users
	banner
	echo "ejabberd: running in the background (stop with: $0 --stop)"
	exit 0
fi

run_node foreground >"$run_dir/ejabberd.out" 2>&1 &
pid=$!
# ctrl-c reaches ejabberdctl but not the Erlang VM (su starts it in a session of its own):
# stop the node the supported way instead.
trap 'ejabberdctl stop >/dev/null 2>&1 || true' INT TERM
wait_ready "$pid" || exit 1
create_users
banner
echo "ejabberd: running (ctrl-c to stop; output in $run_dir/ejabberd.out)"
status=0
wait "$pid" || status=$?
# `wait` returns early when a trapped signal arrives: wait again for the node to stop.
while kill -0 "$pid" 2>/dev/null; do
	wait "$pid" || status=$?
done
exit "$status"
