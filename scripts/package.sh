#!/usr/bin/env bash
# Builds the Debian package target/debian/smartfeeds_VERSION_ARCH.deb with cargo-deb (a
# release build; installs cargo-deb from crates.io first if it is missing) and prints its
# path. What goes in it is [package.metadata.deb] in Cargo.toml and debian/: the binary as
# /usr/bin/smartfeeds, the configuration /etc/smartfeeds/smartfeeds.toml (a conffile), the
# systemd unit, and the maintainer scripts (the smartfeeds system user, /var/lib/smartfeeds).
#
#   scripts/package.sh                 build it
#   dpkg -i target/debian/smartfeeds_*.deb
#
# Extra arguments go to cargo deb (e.g. --no-build to package target/release as it is).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo deb --version >/dev/null 2>&1; then
	echo "package.sh: installing cargo-deb (cargo install --locked cargo-deb)..." >&2
	cargo install --locked cargo-deb
fi
if ! command -v dpkg-deb >/dev/null 2>&1; then
	echo "package.sh: dpkg-deb is missing: this builds Debian packages on Debian or Ubuntu" >&2
	exit 1
fi
# cargo deb prints the package's path as its last line.
deb=$(cargo deb --locked "$@" | tail -n 1)
if [ ! -f "$deb" ]; then
	echo "package.sh: cargo deb built no package (it said: $deb)" >&2
	exit 1
fi
echo "package.sh: $(du -h "$deb" | cut -f1) $deb" >&2
echo "$deb"
