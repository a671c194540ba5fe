#!/usr/bin/env bash
# Runs the whole test suite: unit and property tests, and the end-to-end tests that start
# private XMPP servers on free loopback ports — first everything against Prosody 0.12, then
# the end-to-end tests (tests/e2e_*.rs) again against ejabberd 23.01
# (SMARTFEEDS_TEST_SERVER=ejabberd; see crates/testkit/src/server/select.rs). Installs Prosody, ejabberd,
# chromium and PostgreSQL (Debian packages; the PostgreSQL store's tests start private servers)
# if they are missing, and cargo-deb (tests/e2e_package.rs builds and installs the Debian
# package: run as root). Exits non-zero if either run fails; both always run.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v prosody >/dev/null 2>&1 || [ -x /usr/bin/prosody ] || missing+=(prosody)
command -v ejabberdctl >/dev/null 2>&1 || [ -x /usr/sbin/ejabberdctl ] || missing+=(ejabberd)
# Prosody resolves s2s peers with libunbound; the federation test needs it (not the machine's resolver).
dpkg -s lua-unbound >/dev/null 2>&1 || missing+=(lua-unbound)
command -v chromium >/dev/null 2>&1 || missing+=(chromium) # the HTTP page's browser test
command -v make >/dev/null 2>&1 || missing+=(make) # builds jemalloc, the service's allocator
# The PostgreSQL store's tests start private servers of their own (initdb, pg_ctl).
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
# The OpenAPI tests check the description with openapi-spec-validator and test the API with
# schemathesis (both PyPI), in a venv.
dpkg -s python3-venv >/dev/null 2>&1 || missing+=(python3-venv)
# The programs people use, run against the service by the end-to-end tests: Prosody's own
# WebSub subscriber (mod_pubsub_feeds), a feed reader, and an independent feed parser.
dpkg -s prosody-modules >/dev/null 2>&1 || missing+=(prosody-modules)
command -v newsboat >/dev/null 2>&1 || missing+=(newsboat)
dpkg -s python3-feedparser >/dev/null 2>&1 || missing+=(python3-feedparser)
# XMPP clients nobody here wrote: Libervia's (its backend runs on a private D-Bus session
# bus) and a second XMPP library with its own RSM and MAM code (slixmpp).
command -v libervia-cli >/dev/null 2>&1 || missing+=(libervia-cli)
command -v libervia-backend >/dev/null 2>&1 || missing+=(libervia-backend)
command -v dbus-daemon >/dev/null 2>&1 || missing+=(dbus)
dpkg -s python3-slixmpp >/dev/null 2>&1 || missing+=(python3-slixmpp)
# The Debian package's test: cargo-deb finds the binary's library dependencies with
# dpkg-shlibdeps, and the test reads the packaged binary's sections with readelf.
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing+=(dpkg-dev)
command -v readelf >/dev/null 2>&1 || missing+=(binutils)
if [ "${#missing[@]}" -gt 0 ]; then
	echo "installing ${missing[*]} (Debian packages)..." >&2
	if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The Debian package's test (tests/e2e_package.rs) builds it with cargo-deb (scripts/package.sh).
if ! cargo deb --version >/dev/null 2>&1; then
	echo "installing cargo-deb (cargo install --locked cargo-deb)..." >&2
	cargo install --locked --quiet cargo-deb
fi

if [ ! -x target/venv/bin/openapi-spec-validator ] || [ ! -x target/venv/bin/schemathesis ]; then
	echo "installing openapi-spec-validator and schemathesis (PyPI) in target/venv..." >&2
	/usr/bin/python3 -m venv target/venv
	target/venv/bin/pip install --quiet openapi-spec-validator schemathesis
fi

cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings

status=0
started=$SECONDS
began=$SECONDS
if cargo nextest --version >/dev/null 2>&1; then
	# The Debian package's test (tests/e2e_package.rs) packages the test build's binary (at
	# nice 19) and installs it: it runs beside both passes rather than holding up the end of
	# the first. Its output goes to target/e2e_package.log, shown when it ends.
	SMARTFEEDS_TEST_SERVER=prosody cargo nextest run --no-fail-fast -E 'binary(=e2e_package)' >target/e2e_package.log 2>&1 &
	package=$!
	SMARTFEEDS_TEST_SERVER=prosody cargo nextest run --no-fail-fast -E 'not binary(=e2e_package)' || status=1
	echo "test.sh: all tests but the package's, Prosody: $((SECONDS - started)) s" >&2
	started=$SECONDS
	# crash, hostile and limits assert Prosody's own answers and timings, and federation runs two
	# Prosody servers of its own; they run in the Prosody pass only. cluster starts its own
	# two-node ejabberd cluster whichever server is selected: it already ran in the first pass;
	# package runs once, beside both passes.
	# http_outbound, http_schemathesis and sources_alone start no XMPP server: once is enough for them too.
	SMARTFEEDS_TEST_SERVER=ejabberd cargo nextest run --no-fail-fast \
		-E 'binary(/^e2e_/) - binary(/^e2e_(crash|hostile|limits|federation|cluster|package|http_outbound|http_schemathesis|sources_alone)$/)' || status=1
	echo "test.sh: end-to-end tests, ejabberd: $((SECONDS - started)) s" >&2
	wait "$package" || status=1
	cat target/e2e_package.log >&2
	echo "test.sh: every test done $((SECONDS - began)) s after the first began" >&2
else
	SMARTFEEDS_TEST_SERVER=prosody cargo test --no-fail-fast || status=1
	echo "test.sh: all tests, Prosody: $((SECONDS - started)) s" >&2
	started=$SECONDS
	SMARTFEEDS_TEST_SERVER=ejabberd cargo test --no-fail-fast --test e2e_pull --test e2e_publish --test e2e_disco \
		--test e2e_push --test e2e_link --test e2e_adhoc --test e2e_metrics --test e2e_authz --test e2e_cli || status=1
	echo "test.sh: end-to-end tests, ejabberd: $((SECONDS - started)) s" >&2
fi
exit "$status"
