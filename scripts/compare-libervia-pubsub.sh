#!/bin/bash
# smartfeeds beside libervia-pubsub, the other external pubsub component (Debian package
# libervia-pubsub: RSM, MAM and order-by, on PostgreSQL): both as components of one
# private Prosody 0.12 (pubsub.localhost and feeds.localhost), libervia-pubsub storing in a
# private PostgreSQL 15; then the same scripted session (scripts/pubsub-session.py:
# disco, meta-data, publishes, RSM and max_items pages, order-by, subscribe and the last
# item, a notification, MAM pages) as alice@localhost against each; then everything stops.
# The answers, raw, go to OUT/libervia-pubsub/ and OUT/smartfeeds/; BENCHMARKS.md
# ("Beside libervia-pubsub") compares them point by point.
#
#   scripts/compare-libervia-pubsub.sh     as root (PostgreSQL runs as postgres)
#   OUT=dir                                where the answers go [target/compare]
#   KEEP=1, VERBOSE=1                      keep the temp dir; libervia-pubsub -v
#   SMARTFEEDS=path                        the binary [target/debug/smartfeeds, built]
#
# Needs: prosody, postgresql, libervia-pubsub, python3-slixmpp (Debian packages).
# Everything listens on 127.0.0.1 only, on free ports; nothing under /etc is touched.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$HERE/target/compare}
if [ -z "${SMARTFEEDS:-}" ]; then
  (cd "$HERE" && cargo build --quiet --bin smartfeeds)
  SMARTFEEDS=$HERE/target/debug/smartfeeds
fi
PY=/usr/bin/python3            # Debian's python (not the pyenv one first on PATH)
PGBIN=/usr/lib/postgresql/15/bin
SECRET=pubsubsecret
mkdir -p "$OUT"

TMP=$(mktemp -d /tmp/lpubsub.XXXXXX)
chmod 755 "$TMP"               # postgres must be able to traverse it
PGDATA="$TMP/pgdata"; PGSOCK="$TMP/pgsock"; PDATA="$TMP/prosody"; LPDIR="$TMP/lpubsub"
mkdir -p "$PGDATA" "$PGSOCK" "$PDATA/certs" "$LPDIR"
chown postgres:postgres "$PGDATA" "$PGSOCK"; chmod 700 "$PGDATA"

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PGPORT=$(free_port); C2S_PORT=$(free_port); COMP_PORT=$(free_port)
while [ "$C2S_PORT" = "$PGPORT" ]; do C2S_PORT=$(free_port); done
while [ "$COMP_PORT" = "$PGPORT" ] || [ "$COMP_PORT" = "$C2S_PORT" ]; do COMP_PORT=$(free_port); done
echo "tmp=$TMP pg=$PGPORT c2s=$C2S_PORT component=$COMP_PORT"

now() { date +%s.%N; }
elapsed() { "$PY" -c "print(f'{$2-$1:.2f}s')"; }
# wait_for FILE PATTERN TIMEOUT_S
wait_for() {
  local i=0
  while ! grep -q -- "$2" "$1" 2>/dev/null; do
    i=$((i+1)); [ $i -gt $(($3*10)) ] && { echo "timeout waiting for '$2' in $1" >&2; return 1; }
    sleep 0.1
  done
}

PROSODY_PID=""; LP_PID=""; SF_PID=""; PG_STARTED=""
cleanup() {
  set +e
  local ts=$(now)
  if [ -n "$SF_PID" ] && kill -0 "$SF_PID" 2>/dev/null; then
    kill -TERM "$SF_PID"; wait "$SF_PID" 2>/dev/null
  fi
  if [ -n "$LP_PID" ] && kill -0 "$LP_PID" 2>/dev/null; then
    kill -TERM "$LP_PID"; for _ in $(seq 50); do kill -0 "$LP_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$LP_PID" 2>/dev/null && { echo "libervia-pubsub still alive, KILL"; kill -KILL "$LP_PID"; }
    wait "$LP_PID" 2>/dev/null
  fi
  if [ -n "$PROSODY_PID" ] && kill -0 "$PROSODY_PID" 2>/dev/null; then
    kill -TERM "$PROSODY_PID"; for _ in $(seq 50); do kill -0 "$PROSODY_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PROSODY_PID" 2>/dev/null && { echo "prosody still alive, KILL"; kill -KILL "$PROSODY_PID"; }
    wait "$PROSODY_PID" 2>/dev/null
  fi
  if [ -n "$PG_STARTED" ]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
  fi
  cp -f "$PDATA/prosody.log" "$OUT/prosody.log" 2>/dev/null
  cp -f "$LPDIR/pubsub.log" "$OUT/libervia-pubsub.log" 2>/dev/null
  cp -f "$TMP/smartfeeds.log" "$OUT/smartfeeds.log" 2>/dev/null
  cp -f "$PGSOCK/pg.log" "$OUT/postgresql.log" 2>/dev/null
  if [ -n "${KEEP:-}" ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
  echo "stopped in $(elapsed $ts $(now))"
}
trap cleanup EXIT

############ 1. PostgreSQL ############
t0=$(now)
runuser -u postgres -- "$PGBIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --no-sync >"$TMP/initdb.log"
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGSOCK/pg.log" -w \
  -o "-k $PGSOCK -p $PGPORT -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
PG_STARTED=1
t1=$(now); echo "postgres up in $(elapsed $t0 $t1)"
PSQL=(runuser -u postgres -- "$PGBIN/psql" -h "$PGSOCK" -p "$PGPORT" -U postgres -v ON_ERROR_STOP=1 -q)
"${PSQL[@]}" -d postgres -c "CREATE DATABASE pubsub"
"${PSQL[@]}" -d pubsub -f /usr/share/libervia/sat_pubsub/db/pubsub.sql
echo "schema version: $("${PSQL[@]}" -d pubsub -At -c "SELECT value FROM metadata WHERE key='version'")"

############ 2. Prosody ############
cat >"$PDATA/prosody.cfg.lua" <<EOF
run_as_root = true
pidfile = "$PDATA/prosody.pid"
data_path = "$PDATA"
certificates = "$PDATA/certs"
log = { { levels = { min = "${PROSODY_LOG_LEVEL:-info}" }, to = "file", filename = "$PDATA/prosody.log" } }
modules_enabled = { "roster"; "saslauth"; "disco"; "ping"; "posix" }
modules_disabled = { "s2s"; "s2s_auth_certs"; "dialback"; "tls" }
s2s_ports = {}
interfaces = { "127.0.0.1" }
c2s_ports = { $C2S_PORT }
c2s_direct_tls_ports = {}
component_interfaces = { "127.0.0.1" }
component_ports = { $COMP_PORT }
c2s_require_encryption = false
allow_unencrypted_plain_auth = true
authentication = "internal_plain"
storage = "internal"

VirtualHost "localhost"

Component "pubsub.localhost"
	component_secret = "$SECRET"

Component "feeds.localhost"
	component_secret = "$SECRET"
EOF
# accounts: internal_plain stores DATA/<host>/accounts/<user>.dat as a Lua table
mkdir -p "$PDATA/localhost/accounts"
for u in alice bob; do printf 'return {\n\t["password"] = "%s";\n};\n' "${u}pass" >"$PDATA/localhost/accounts/$u.dat"; done

t0=$(now)
( cd "$PDATA" && exec prosody -F --config "$PDATA/prosody.cfg.lua" >"$PDATA/stdout.log" 2>&1 ) &
PROSODY_PID=$!
wait_for "$PDATA/prosody.log" "Activated service 'c2s' on \[127.0.0.1\]:$C2S_PORT" 20
wait_for "$PDATA/prosody.log" "Activated service 'component' on \[127.0.0.1\]:$COMP_PORT" 20
t1=$(now); echo "prosody up in $(elapsed $t0 $t1)"

############ 3. libervia-pubsub ############
# Debian ships no twistd wrapper named "twistd" (only twistd3/twist3); `python3 -m twisted`
# is the `twist` runner: foreground, logs to stdout. The plugin's tapname is
# "libervia-pubsub" (the Debian systemd unit's "sat_pubsub" is stale). PYTHONPATH must hold
# /usr/share/libervia for both sat_pubsub and sat_tmp (patched wokkel with rsm/mam).
# cwd = an empty dir so no ./libervia.conf or ./sat.conf is picked up; PG* and
# LIBERVIA_PUBSUB_* environment variables would override defaults, so unset them.
LP_ARGS=(--jid pubsub.localhost --xmpp_pwd "$SECRET" --rhost 127.0.0.1 --rport "$COMP_PORT"
         --backend pgsql --db_name pubsub --db_user postgres --db_host 127.0.0.1 --db_port "$PGPORT")
[ -n "${VERBOSE:-}" ] && LP_ARGS+=(-v)
t0=$(now)
( cd "$LPDIR" && exec env -u PGUSER -u PGDATABASE -u PGPASSWORD -u PGHOST -u PGPORT \
    PYTHONPATH=/usr/share/libervia "$PY" -m twisted --log-format=text --log-level=info libervia-pubsub "${LP_ARGS[@]}" \
    >"$LPDIR/pubsub.log" 2>&1 ) &
LP_PID=$!
echo "+ PYTHONPATH=/usr/share/libervia $PY -m twisted --log-format=text --log-level=info libervia-pubsub ${LP_ARGS[*]}"
wait_for "$PDATA/prosody.log" "External component successfully authenticated" 60
t1=$(now); echo "libervia-pubsub connected in $(elapsed $t0 $t1)"

############ 4. smartfeeds ############
cat >"$TMP/smartfeeds.toml" <<EOF
[component]
jid = "feeds.localhost"
secret = "$SECRET"
server = "127.0.0.1:$COMP_PORT"

[store]
path = "$TMP/smartfeeds.db"

[[feeds]]
name = "session"
title = "The session's feed"
publishers = ["alice@localhost"]
default_order = "created"
send_last_published_item = "on_sub"
EOF
t0=$(now)
RUST_LOG=info "$SMARTFEEDS" --config "$TMP/smartfeeds.toml" >"$TMP/smartfeeds.log" 2>&1 &
SF_PID=$!
wait_for "$TMP/smartfeeds.log" "connected" 30
t1=$(now); echo "smartfeeds connected in $(elapsed $t0 $t1)"

############ 5. the session, against each ############
for target in "libervia-pubsub pubsub.localhost" "smartfeeds feeds.localhost"; do
  read -r name service <<<"$target"
  t0=$(now)
  mkdir -p "$OUT/$name"
  "$PY" "$HERE/scripts/pubsub-session.py" --port "$C2S_PORT" --service "$service" --node session \
    --out "$OUT/$name" >"$OUT/$name.txt" 2>&1 || echo "$name: the session reported a failure (see $OUT/$name.txt)"
  t1=$(now); echo "$name: session done in $(elapsed $t0 $t1), answers in $OUT/$name/"
done

############ 6. stop (trap) ############
