#!/bin/sh
# Start a local Prosody 0.12 for the smartfeeds demo, from prosody/prosody.cfg.lua.
#
# Usage: prosody/start.sh [--background|-b] [--stop]
#
# Environment (defaults in brackets):
#   PROSODY_RUN_DIR         run directory: data, pid file, log, generated config [./run/prosody]
#   PROSODY_C2S_PORT        client port [5222]
#   PROSODY_COMPONENT_PORT  XEP-0114 component port [5347]
#   PROSODY_SECRET          secret of the feeds.localhost component [secret]
#   PROSODY_LOG_LEVEL       debug, info, warn, error [info]
#   SMARTFEEDS_PROSODY_MULTICAST=off  leave out multicast.localhost, the XEP-0033 service
#                           for feeds.localhost (prosody/mod_component_multicast.lua)
#   PROSODY_NETWORK_DEFAULTS=1  leave out the network tuning of prosody.cfg.lua (read size,
#                           Nagle), to measure Prosody as it comes
#   PROSODY_ANONYMOUS=1     add anon.localhost, a host of anonymous logins (SASL ANONYMOUS):
#                           the load tool's client sessions (smartfeeds-load fanout --sessions)
#
# Demo accounts (created or reset on every start), all with the password "password"
# (the test harness creates the same ones):
#   admin@localhost   global admin of smartfeeds (admins = ["admin@localhost"])
#   bot@localhost     a feed publisher
#   alice@localhost   a reader
#   bob@localhost     another reader
# Components: feeds.localhost (external, secret above), pubsub.localhost (Prosody's pubsub),
# multicast.localhost (XEP-0033 for feeds.localhost); for scripts/bench-peers.sh the load
# tool's bench.localhost, publisher.localhost and canned.localhost, and libervia.localhost
# (libervia-pubsub), all external with the same secret.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/server-args.sh"

run_dir=${PROSODY_RUN_DIR:-./run/prosody}
mkdir -p "$run_dir"
run_dir=$(cd "$run_dir" && pwd)
pidfile="$run_dir/prosody.pid"

if [ "$stop" = 1 ]; then
	pid=$(cat "$pidfile" 2>/dev/null || true)
	if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
		echo "stopped prosody (pid $pid)"
	else
		echo "prosody is not running (no live pid in $pidfile)"
	fi
	exit 0
fi

if ! command -v prosody >/dev/null 2>&1; then
	echo "prosody not found: install the Debian package with 'apt-get install prosody'" >&2
	exit 1
fi

c2s_port=${PROSODY_C2S_PORT:-5222}
component_port=${PROSODY_COMPONENT_PORT:-5347}
secret=${PROSODY_SECRET:-secret}
log_level=${PROSODY_LOG_LEVEL:-info}
config="$run_dir/prosody.cfg.lua"

# Fill in the template. '|' is the sed delimiter, so it may not appear in the values.
untune='s|^$||'
[ "${PROSODY_NETWORK_DEFAULTS:-0}" = 1 ] && untune='/^network_\(default_read_size\|settings\) = /d'
sed -e "$untune" \
    -e "s|@C2S_PORT@|$c2s_port|g" \
    -e "s|@COMPONENT_PORT@|$component_port|g" \
    -e "s|@DATA@|$run_dir|g" \
    -e "s|@SECRET@|$secret|g" \
    -e "s|@LOG_LEVEL@|$log_level|g" \
    -e "s|@PLUGIN_DIR@|$here|g" \
    "$here/prosody.cfg.lua" > "$config"

# Accounts for authentication = "internal_plain": one Lua file per user.
mkdir -p "$run_dir/localhost/accounts" "$run_dir/certs"
for user in admin bot alice bob; do
	printf 'return {\n\t["password"] = "password";\n};\n' > "$run_dir/localhost/accounts/$user.dat"
done

echo "prosody: c2s 127.0.0.1:$c2s_port, component feeds.localhost on 127.0.0.1:$component_port (secret '$secret')"
echo "prosody: config $config, log $run_dir/prosody.log"
if [ "$background" = 1 ]; then
	nohup prosody -F --config "$config" >"$run_dir/prosody.out" 2>&1 &
	echo "prosody: started in the background, pid $! (stop with: $0 --stop)"
else
	exec prosody -F --config "$config"
fi
