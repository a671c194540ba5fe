#!/usr/bin/env bash
# Runs the whole test suite: unit and property tests, and the end-to-end tests that start
# private Prosody instances on free loopback ports. Installs Prosody if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prosody >/dev/null 2>&1; then
	echo "installing prosody (Debian package)..." >&2
	if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq prosody >/dev/null
fi

cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
	cargo nextest run --no-fail-fast
else
	cargo test --no-fail-fast
fi
