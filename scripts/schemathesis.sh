#!/usr/bin/env bash
# Property-based API testing at full size: schemathesis (PyPI) generates EXAMPLES requests
# per documented operation (default 2000) from the real service's /openapi.json and sends
# them to the real binary, failing on any 5xx, any answer outside its documented status,
# content type, headers or schema, or slower than 5 s. It is the CI test
# tests/e2e_http_schemathesis.rs with more requests:
#   scripts/schemathesis.sh [EXAMPLES]
# Installs schemathesis in target/venv if it is missing (as scripts/test.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
examples=${1:-2000}
if [ ! -x target/venv/bin/schemathesis ]; then
	echo "installing schemathesis (PyPI) in target/venv..." >&2
	[ -x target/venv/bin/pip ] || /usr/bin/python3 -m venv target/venv
	target/venv/bin/pip install --quiet schemathesis
fi
started=$SECONDS
set +e
SMARTFEEDS_SCHEMATHESIS_EXAMPLES=$examples cargo nextest run --test e2e_http_schemathesis --no-capture \
	>target/schemathesis.log 2>&1
status=$?
set -e
# schemathesis' summary, then the requests and answers per operation the test counted.
grep -aE '^ *(❌|[0-9]+ generated)|^schemathesis:|^  [A-Z]+ /|^  all ' target/schemathesis.log || true
echo "schemathesis.sh: $examples examples per operation, $((SECONDS - started)) s, exit $status (full output: target/schemathesis.log)" >&2
exit "$status"
