#!/usr/bin/env bash
# Runs the fault suite (tests/it's `faults::scenarios::`, eight at a time, as ./scripts/test.sh
# runs it) and rewrites RELIABILITY.md's fault table from what the run found: a cell says
# `pass` only where that test passed in this run, `FAIL` where it failed, and is empty where
# the suite has no such case (the reasons are listed under the table).
#
#   scripts/reliability.sh
#
# It needs what ./scripts/test.sh installs, and exits non-zero when a scenario failed (the
# table is rewritten all the same, with the failure in it).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
it_binary="$(cargo test --all-features --test it --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"target":{"kind":\["test"\][^}]*"name":"it".*"executable":"\([^"]*\)".*/\1/p')"
if [ ! -x "$it_binary" ]; then
    echo "error: the integration-test binary (tests/it) did not build: run cargo test --no-run" >&2
    exit 1
fi
outcomes="target/fault-outcomes"
rm -rf "$outcomes"
mkdir -p "$outcomes"
export DISTLOCK_FAULT_OUTCOMES="$PWD/$outcomes"
status=0
"$it_binary" --quiet --test-threads 8 faults::scenarios:: || status=$?
DISTLOCK_WRITE_RELIABILITY=1 "$it_binary" --quiet --ignored --exact \
    faults::reliability_md_is_the_fault_suites_outcomes
echo "==> RELIABILITY.md's fault table rewritten from this run ($(ls "$outcomes" | wc -l) scenario tests)"
exit "$status"
