#!/usr/bin/env bash
# franz-go's own integration tests (pkg/kgo of github.com/twmb/franz-go v1.22.3, the tests
# franz-go runs against a real Kafka) against a fresh Strom or Apache Kafka 4.4 cluster.
#
#   scripts/franz-go-suite.sh strom [NODES] [OPTIONS]   NODES Strom nodes (default 1)
#   scripts/franz-go-suite.sh kafka [NODES] [OPTIONS]   NODES Kafka 4.4 brokers (combined KRaft)
#   scripts/franz-go-suite.sh summary DIR               the counts of a finished run again
#
# Options:
#   --run REGEX     only the tests matching REGEX (go test -run)
#   --count N       run each test N times (go test -count; default 1)
#   --timeout DUR   go test -timeout (default 30m)
#   --dir DIR       where data and logs go (default: a new /tmp/franz-go-suite.XXXXXX, kept)
#   --set KEY=VAL   an extra broker config for every node (repeatable)
#   --keep-data     keep the brokers' data (by default only their logs are kept)
#   --exec CMD      run CMD (with bash -c) instead of the tests, against the same fresh cluster:
#                   KGO_SEEDS, KGO_TEST_RF and SUITE_NODE_PIDS ("1:PID,2:PID,...") are set
#
# Environment: STROM_BIN (default target/release/strom, else target/debug/strom; built with
# `cargo build --release -p strom` when neither exists), KGO_TEST_RF (default NODES),
# KGO_LOG_LEVEL (franz-go's test logs: info, debug or none; default info).
#
# The module comes from the Go proxy (`go mod download`); its test binary is compiled once into
# .cache/franz-go-v1.22.3/. Both systems get group.initial.rebalance.delay.ms=0; a single node
# gets replication factor 1 for its internal topics (as scripts/kafka-ref.sh and franz-go's own
# CI Kafka). Prints the pass / fail / skip counts of the top-level tests and the failing names;
# the full output is in DIR/kgo.log (DIR/kgo.json as `go test -json`), the brokers' logs under
# DIR. Exit status 0 when no test failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FRANZ_VERSION="${FRANZ_VERSION:-v1.22.3}"
CACHE="${FRANZ_SUITE_CACHE:-$ROOT/.cache/franz-go-$FRANZ_VERSION}"

usage() { sed -n '2,25p' "$0" >&2; exit 2; }

system="${1:-}"; shift || true
case "$system" in
    strom|kafka) ;;
    summary) [[ -f "${1:-}/kgo.json" ]] || usage; set -- --dir "$1" ;;
    *) usage ;;
esac
nodes=1
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then nodes="$1"; shift; fi
(( nodes >= 1 )) || usage
run_re="" count=1 timeout=30m dir="" sets=() keep_data=0 exec_cmd=""
while (( $# )); do
    case "$1" in
        --run) run_re="${2:?}"; shift 2 ;;
        --count) count="${2:?}"; shift 2 ;;
        --timeout) timeout="${2:?}"; shift 2 ;;
        --dir) dir="${2:?}"; shift 2 ;;
        --set) sets+=("${2:?}"); shift 2 ;;
        --keep-data) keep_data=1; shift ;;
        --exec) exec_cmd="${2:?}"; shift 2 ;;
        *) usage ;;
    esac
done
if [[ -z "$dir" ]]; then dir="$(mktemp -d /tmp/franz-go-suite.XXXXXX)"; fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

log() { echo "franz-go-suite: $*" >&2; }

# ---- franz-go's test binary -------------------------------------------------------------------
test_binary() {
    local bin="$CACHE/kgo.test" src="$CACHE/src"
    if [[ -x "$bin" && -f "$CACHE/.go-version" && "$(go version)" == "$(cat "$CACHE/.go-version")" ]]; then
        return 0
    fi
    mkdir -p "$CACHE"
    local mod
    mod="$(cd "$CACHE" && GOFLAGS=-mod=mod go mod download -json "github.com/twmb/franz-go@$FRANZ_VERSION" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "$mod" ]] || { log "go mod download gave no module dir"; exit 1; }
    # The module cache is read-only; compile from a writable copy of it.
    rm -rf "$src"
    cp -r "$mod" "$src"
    chmod -R u+w "$src"
    log "compiling franz-go $FRANZ_VERSION pkg/kgo tests (once)"
    (cd "$src" && go test -c -o "$bin" ./pkg/kgo)
    go version > "$CACHE/.go-version"
}

# ---- ports ------------------------------------------------------------------------------------
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A base port B with B..B+n-1 and B+100..B+100+n-1 all free (strom dev-cluster's layout).
free_base() {
    local n="$1" b i ok
    for _ in $(seq 1 200); do
        b=$(( 20000 + RANDOM % 30000 ))
        ok=1
        for (( i = 0; i < n; i++ )); do
            port_free $((b + i)) && port_free $((b + 100 + i)) || { ok=0; break; }
        done
        (( ok )) && { echo "$b"; return 0; }
    done
    log "no free ports"; exit 1
}

wait_port() { # PORT PID WHAT LOGFILE
    for _ in $(seq 1 900); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        if ! kill -0 "$2" 2>/dev/null; then
            log "$3 exited; see $4"; tail -30 "$4" >&2 || true; exit 1
        fi
        sleep 0.1
    done
    log "$3 did not listen on $1 within 90 s"; exit 1
}

pids=() test_pid=""
cleanup() {
    local p
    if [[ -n "$test_pid" ]]; then kill -TERM -- "-$test_pid" 2>/dev/null || true; fi
    # (SIGCONT first: an --exec command may have paused a node.)
    for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    # The partitions' data (gigabytes after a full run); the nodes' logs stay.
    if (( ! keep_data )) && [[ "$system" != summary ]]; then
        find "$dir" -mindepth 2 -maxdepth 2 -path "$dir/node-*" -type d -exec rm -rf {} + || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

common_sets=(group.initial.rebalance.delay.ms=0)
if (( nodes == 1 )); then
    common_sets+=(offsets.topic.replication.factor=1 transaction.state.log.replication.factor=1
        transaction.state.log.min.isr=1)
fi

# ---- Strom ------------------------------------------------------------------------------------
start_strom() {
    local bin="${STROM_BIN:-}"
    if [[ -z "$bin" ]]; then
        if [[ -x "$ROOT/target/release/strom" ]]; then bin="$ROOT/target/release/strom"
        elif [[ -x "$ROOT/target/debug/strom" ]]; then bin="$ROOT/target/debug/strom"
        else
            (cd "$ROOT" && cargo build --release -p strom)
            bin="$ROOT/target/release/strom"
        fi
    fi
    log "strom binary: $bin"
    local base args=() s seeds=() i
    base="$(free_base "$nodes")"
    for s in "${common_sets[@]}" "${sets[@]}"; do args+=(--set "$s"); done
    if (( nodes == 1 )); then
        # The data dir does not exist yet: a fresh node formats it itself.
        mkdir -p "$dir/node-1"
        "$bin" server --node-id 1 --listen "127.0.0.1:$base" --data-dir "$dir/node-1/data" "${args[@]}" \
            > "$dir/node-1/server.log" 2>&1 < /dev/null &
        pids+=($!)
        NODE_PIDS="1:$!"
        wait_port "$base" "$!" "strom" "$dir/node-1/server.log"
    else
        # dev-cluster stops its nodes on SIGTERM.
        "$bin" dev-cluster --nodes "$nodes" --base-port "$base" --data-dir "$dir" "${args[@]}" \
            > "$dir/dev-cluster.log" 2>&1 < /dev/null &
        pids+=($!)
        for (( i = 0; i < nodes; i++ )); do
            wait_port $((base + i)) "${pids[0]}" "strom dev-cluster" "$dir/dev-cluster.log"
        done
        # Its nodes too, should it exit without stopping them.
        pids+=($(sed -n 's/^node [0-9]*: pid \([0-9]*\) .*/\1/p' "$dir/dev-cluster.log"))
        NODE_PIDS="$(sed -n 's/^node \([0-9]*\): pid \([0-9]*\) .*/\1:\2/p' "$dir/dev-cluster.log" \
            | paste -sd,)"
    fi
    for (( i = 0; i < nodes; i++ )); do seeds+=("127.0.0.1:$((base + i))"); done
    SEEDS="$(IFS=,; echo "${seeds[*]}")"
}

# ---- Kafka 4.4 --------------------------------------------------------------------------------
# Combined KRaft nodes (controller voter and broker each), configured as
# crates/strom/src/chaos/kafka_cluster.rs does.
start_kafka() {
    local cp base voters="" i id nd cluster_id seeds=() s
    cp="$("$ROOT/scripts/kafka-ref.sh" classpath)"
    base="$(free_base "$nodes")"
    for (( i = 0; i < nodes; i++ )); do
        voters+="${voters:+,}$((i + 1))@127.0.0.1:$((base + 100 + i))"
    done
    cluster_id="$(java -cp "$cp" kafka.tools.StorageTool random-uuid)"
    for (( i = 0; i < nodes; i++ )); do
        id=$((i + 1)) nd="$dir/node-$id"
        mkdir -p "$nd/data"
        {
            echo "process.roles=broker,controller"
            echo "node.id=$id"
            echo "controller.quorum.voters=$voters"
            echo "listeners=PLAINTEXT://127.0.0.1:$((base + i)),CONTROLLER://127.0.0.1:$((base + 100 + i))"
            echo "advertised.listeners=PLAINTEXT://127.0.0.1:$((base + i))"
            echo "inter.broker.listener.name=PLAINTEXT"
            echo "controller.listener.names=CONTROLLER"
            echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
            echo "log.dirs=$nd/data"
            echo "num.partitions=1"
            for s in "${common_sets[@]}" "${sets[@]}"; do echo "$s"; done
        } > "$nd/server.properties"
        cat > "$nd/log4j2.properties" <<L4J
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $nd/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
L4J
        java -Xmx256m "-Dlog4j2.configurationFile=$nd/log4j2.properties" -cp "$cp" \
            kafka.tools.StorageTool format -t "$cluster_id" -c "$nd/server.properties" \
            > "$nd/format.log" 2>&1 || { cat "$nd/format.log" >&2; exit 1; }
    done
    for (( i = 0; i < nodes; i++ )); do
        id=$((i + 1)) nd="$dir/node-$id"
        java -Xmx512m -Xms256m -XX:+UseG1GC "-Dlog4j2.configurationFile=$nd/log4j2.properties" \
            -cp "$cp" kafka.Kafka "$nd/server.properties" > "$nd/stdout.log" 2>&1 < /dev/null &
        pids+=($!)
    done
    NODE_PIDS=""
    for (( i = 0; i < nodes; i++ )); do
        wait_port $((base + i)) "${pids[$i]}" "kafka node $((i + 1))" "$dir/node-$((i + 1))/stdout.log"
        seeds+=("127.0.0.1:$((base + i))")
        NODE_PIDS+="${NODE_PIDS:+,}$((i + 1)):${pids[$i]}"
    done
    SEEDS="$(IFS=,; echo "${seeds[*]}")"
}

# ---- results ---------------------------------------------------------------------------------
# Top-level tests only (subtests are part of their parent's result); a test that started but
# never ended (the binary panicked or timed out) is "unfinished", and counts as a failure. The events are filtered as a stream
# first: slurping the whole output would take gigabytes.
summarize() { # DIR
    jq -j 'select(.Action == "output") | .Output' "$1/kgo.json" > "$1/kgo.log"
    jq -c 'select(.Test != null and (.Test | contains("/") | not)
        and (.Action == "run" or .Action == "pass" or .Action == "fail" or .Action == "skip"))
        | {Action, Test}' "$1/kgo.json" > "$1/results.json"
    jq -rs '
        [ .[] | select(.Action == "pass") | .Test ] as $pass
        | [ .[] | select(.Action == "fail") | .Test ] as $fail
        | [ .[] | select(.Action == "skip") | .Test ] as $skip
        | [ .[] | select(.Action == "run") | .Test ] as $run
        | ($run - $pass - $fail - $skip) as $unfinished
        | "pass \($pass | length)  fail \($fail | length)  skip \($skip | length)  unfinished \($unfinished | length)  (of \($run | length) started)",
          ( $fail | unique[] | "FAIL " + . ),
          ( $unfinished | unique[] | "UNFINISHED " + . ),
          ( $skip | unique[] | "skip " + . )
    ' "$1/results.json"
    # A panic (e.g. a test's goroutine failing after its test ended) stops the whole binary.
    grep -m1 -A1 '^panic: ' "$1/kgo.log" | sed 's/^/binary stopped: /' || true
    echo "log: $1/kgo.log"
}

if [[ "$system" == summary ]]; then
    summarize "$dir"
    exit 0
fi

# ---- run --------------------------------------------------------------------------------------
test_binary
"start_$system"
rf="${KGO_TEST_RF:-$nodes}"
log "$system, $nodes node(s), seeds $SEEDS, KGO_TEST_RF=$rf, data and logs in $dir"
if [[ -n "$exec_cmd" ]]; then
    KGO_SEEDS="$SEEDS" KGO_TEST_RF="$rf" SUITE_NODE_PIDS="$NODE_PIDS" bash -c "$exec_cmd"
    exit $?
fi
targs=(-test.v=test2json "-test.timeout=$timeout" "-test.count=$count")
[[ -n "$run_re" ]] && targs+=("-test.run=$run_re")
start_s=$SECONDS
set +e
# The tests run from their package directory, as `go test` runs them; in the background, so
# that a signal to this script stops them (and the brokers) at once.
# setsid: its own process group (test2json and the test binary), stopped as one.
(cd "$CACHE/src/pkg/kgo" && KGO_SEEDS="$SEEDS" KGO_TEST_RF="$rf" exec setsid \
    go tool test2json -t -p github.com/twmb/franz-go/pkg/kgo "$CACHE/kgo.test" "${targs[@]}") \
    > "$dir/kgo.json" 2> "$dir/kgo.stderr" &
test_pid=$!
wait "$test_pid"
status=$?
test_pid=""
set -e
elapsed=$(( SECONDS - start_s ))
summary="$(summarize "$dir")"
echo "franz-go $FRANZ_VERSION pkg/kgo on $system, $nodes node(s), KGO_TEST_RF=$rf${run_re:+, -run $run_re}, count $count: ${elapsed}s"
echo "$summary"
if grep -q '^FAIL \|^UNFINISHED ' <<< "$summary" || (( status != 0 )); then exit 1; fi
