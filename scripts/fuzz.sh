#!/usr/bin/env bash
# Fuzzes stanza parsing, routing and the core (in-memory store) for a bounded time:
#   scripts/fuzz.sh [SECONDS]      (default 60)
# Needs cargo-fuzz (`cargo install cargo-fuzz`). libFuzzer needs unstable compiler flags;
# RUSTC_BOOTSTRAP lets the stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
mkdir -p fuzz/corpus/stanza
cp -n fuzz/seeds/stanza/* fuzz/corpus/stanza/
RUSTC_BOOTSTRAP=1 cargo fuzz run stanza --fuzz-dir fuzz -- -max_total_time="$seconds" -print_final_stats=1
