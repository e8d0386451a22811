#!/usr/bin/env bash
# The benchmark, and BENCHMARKS.md generated from its rows, in one command:
#   scripts/bench.sh                                                     # every row
#   DISTLOCK_BENCH_QUICK=1 DISTLOCK_BENCH_REDLOCK_ONLY=1 scripts/bench.sh  # some rows
# 1. runs `cargo run --release -p distlock-bench` with this environment (every DISTLOCK_BENCH_*
#    variable and BENCH_PEER_POOL it reads, and CARGO_TARGET_DIR, pass through; each row
#    records the DISTLOCK_BENCH_* and BENCH_PEER_POOL variables as its command), which writes
#    the run's rows to $CARGO_TARGET_DIR/distlock-bench.json (target/ by default);
# 2. merges them into bench/results.json (a row of the same store and key is replaced: the
#    file keeps each row's latest run) and writes BENCHMARKS.md from that file
#    (bench/results.py; `python3 bench/results.py` alone renders it again without a run).
# The rows measured before a failure are merged too; the script then exits with the failure.
set -euo pipefail
cd "$(dirname "$0")/.."

json="${CARGO_TARGET_DIR:-target}/distlock-bench.json"
# A file left by an earlier run must never be merged as this run's.
rm -f "$json"
status=0
cargo run --release -p distlock-bench || status=$?
if [ -f "$json" ]; then
    python3 bench/results.py --merge "$json"
else
    echo "scripts/bench.sh: the benchmark wrote no rows ($json); BENCHMARKS.md unchanged" >&2
fi
exit "$status"
