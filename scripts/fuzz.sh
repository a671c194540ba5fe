#!/usr/bin/env bash
# Fuzzes each target for a bounded time, one after the other:
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (default 60 s each, every target)
# Targets (fuzz/fuzz_targets/): stanza (stanza parsing, routing and the core), query (the HTTP
# query and position-spec parser), websub_form (the hub's request form), atom_entry (the
# check of an HTTP publish's body), feed_document (feed documents read with feed-rs),
# source_document (a source's document read as a fetch reads it: Atom kept as written, RSS
# and JSON Feed written as Atom).
# Each starts from its seeds (fuzz/seeds/TARGET/) and the corpus earlier runs grew
# (fuzz/corpus/TARGET/, not kept in git). A crash stops the script with libFuzzer's report
# and the input under fuzz/artifacts/TARGET/. The last line per target gives its executions.
# Needs cargo-fuzz (`cargo install cargo-fuzz`). libFuzzer needs unstable compiler flags;
# RUSTC_BOOTSTRAP lets the stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
	targets=(stanza query websub_form atom_entry feed_document source_document)
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
	echo "fuzz.sh: cargo-fuzz is missing: cargo install cargo-fuzz" >&2
	exit 1
fi
summary=()
for target in "${targets[@]}"; do
	mkdir -p "fuzz/corpus/$target"
	cp -n "fuzz/seeds/$target"/* "fuzz/corpus/$target/"
	log=$(mktemp)
	echo "fuzz.sh: $target for $seconds s (output in $log)..." >&2
	if ! RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" --fuzz-dir fuzz -- \
		-max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
		tail -n 80 "$log" >&2
		echo "fuzz.sh: $target failed (its input is under fuzz/artifacts/$target/)" >&2
		exit 1
	fi
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	rm -f "$log"
	summary+=("$target: ${runs:-?} executions in ${seconds} s, no crash")
done
printf 'fuzz.sh: %s\n' "${summary[@]}"
