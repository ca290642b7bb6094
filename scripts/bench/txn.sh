#!/usr/bin/env bash
# Transactions: Strom vs Apache Kafka 4.4 on this machine, A/B alternated, the same Java client
# (kafka-clients 4.4, scripts/bench/java/TxnBench.java) driving both, single node each.
#
#   scripts/bench/txn.sh                              ROUNDS=3, every workload
#   ROUNDS=1 TXN_SIZES=1000 WORKLOADS=produce scripts/bench/txn.sh      a subset
#
# Per round, one broker at a time on a fresh data dir (odd rounds Strom first, even Kafka first),
# topic tb (PARTITIONS partitions):
#   produce  for each of TXN_SIZES: one transactional producer sends RECORDS records of
#            RECORD_BYTES in transactions of that size (begin, sends, commit, back to back);
#            records/s, MB/s, transactions/s, commitTransaction p50/p99
#   e2e      for each of TXN_SIZES: a transactional producer and a read_committed consumer for
#            E2E_SECONDS; send() -> received latency p50/p99/max
#
# Results: $OUT/results.csv (round,broker,delay_ms,workload,strategy,members,metric,value,load1;
# strategy = transaction size, members = record bytes, delay_ms = 0) and $OUT/summary.md
# (scripts/bench/groups_summary.py). Every process it starts is killed by pid on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${ROUNDS:-3}"
WORKLOADS="${WORKLOADS:-produce e2e}"
TXN_SIZES="${TXN_SIZES:-1000 10}"
RECORDS="${RECORDS:-500000}"
SMALL_TXN_RECORDS="${SMALL_TXN_RECORDS:-20000}"
RECORD_BYTES="${RECORD_BYTES:-100}"
PARTITIONS="${PARTITIONS:-6}"
E2E_SECONDS="${E2E_SECONDS:-15}"
BROKERS="${BROKERS:-strom kafka}"
OUT="${OUT:-/tmp/strom-txn.$(date +%Y%m%d-%H%M%S)}"
STROM_PORT="${STROM_PORT:-39792}"
KAFKA_PORT="${KAFKA_PORT:-39892}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
STROM_BIN="${STROM_BIN:-$TARGET_DIR/release/strom}"
mkdir -p "$OUT"

BENCH_NAME=txn
remove_broker_dir() { [[ -z "${BROKER_DIR:-}" ]] || rm -rf "$BROKER_DIR"; }
CLEANUP_EXTRA=remove_broker_dir
# shellcheck source=scripts/bench/lib.sh
source "$ROOT/scripts/bench/lib.sh"

if [[ -z "${SKIP_BUILD:-}" ]]; then
    log "cargo build --release -p strom"
    (cd "$ROOT" && cargo build --release -p strom >&2)
fi
"$ROOT/scripts/kafka-ref.sh" fetch
CP="$("$ROOT/scripts/kafka-ref.sh" classpath)"
mkdir -p "$OUT/classes"
javac -d "$OUT/classes" -cp "$CP" "$ROOT/scripts/bench/java/TxnBench.java"
cat > "$OUT/tools-log4j2.properties" <<'L4J'
status = warn
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %p %m%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = STDERR
L4J
JAVA_TOOL=(java -Xmx1g -XX:+UseG1GC "-Dlog4j2.configurationFile=$OUT/tools-log4j2.properties")
TB=("${JAVA_TOOL[@]}" -cp "$OUT/classes:$CP" TxnBench)
TOPICS=("${JAVA_TOOL[@]}" -cp "$CP" org.apache.kafka.tools.TopicCommand)

{
    echo "# txn.sh run $(date -Is)"
    echo "rounds=$ROUNDS workloads=$WORKLOADS txn_sizes=$TXN_SIZES records=$RECORDS small_txn_records=$SMALL_TXN_RECORDS"
    echo "record_bytes=$RECORD_BYTES partitions=$PARTITIONS e2e_seconds=$E2E_SECONDS"
    echo "strom=$(cd "$ROOT" && git rev-parse --short HEAD) $("$STROM_BIN" --version)"
    nproc; uname -r; grep -m1 'model name' /proc/cpuinfo || true
    echo "uptime at start: $(uptime)"
} > "$OUT/env.txt"
echo "round,broker,delay_ms,workload,strategy,members,metric,value,load1" > "$OUT/results.csv"

BROKER_PID=""
BROKER_DIR=""
PORT=""

start_broker() {
    local b="$1" round="$2"
    for p in "$STROM_PORT" "$KAFKA_PORT" "$((KAFKA_PORT + 1))"; do
        if port_busy "$p"; then log "port $p is in use; set STROM_PORT / KAFKA_PORT"; exit 1; fi
    done
    BROKER_DIR="$(mktemp -d "/tmp/strom-txn-$b-r$round.XXXXXX")"
    if [[ "$b" == strom ]]; then
        PORT="$STROM_PORT"
        RUST_LOG=warn "$STROM_BIN" server --listen "127.0.0.1:$PORT" --data-dir "$BROKER_DIR/data" \
            > "$BROKER_DIR/server.log" 2>&1 < /dev/null &
        BROKER_PID=$!
        PIDS+=("$BROKER_PID")
        wait_port "$PORT" "$BROKER_PID"
    else
        PORT="$KAFKA_PORT"
        BROKER_PID="$("$ROOT/scripts/kafka-ref.sh" start "$PORT" "$BROKER_DIR")"
        PIDS+=("$BROKER_PID")
    fi
    run_tool "$OUT/r$round-$b-topic.log" "${TOPICS[@]}" --bootstrap-server "127.0.0.1:$PORT" \
        --create --topic tb --partitions "$PARTITIONS" --replication-factor 1
    log "$b started: pid $BROKER_PID port $PORT dir $BROKER_DIR"
}

stop_broker() {
    if [[ -n "$BROKER_PID" ]]; then
        kill -TERM "$BROKER_PID" 2>/dev/null || true
        for _ in $(seq 1 300); do
            kill -0 "$BROKER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
    fi
    rm -rf "$BROKER_DIR"
    BROKER_DIR=""
    BROKER_PID=""
}

row() { local IFS=,; echo "$*" >> "$OUT/results.csv"; }
value() { sed -E "s/.* $1=([^ ]+).*/\1/" <<< " $2"; }
run_tool() {
    local logf="$1"; shift
    "$@" > "$logf.out" 2> "$logf" < /dev/null &
    local pid=$!
    PIDS+=("$pid")
    wait "$pid"
}

run_workloads() {
    local round="$1" b="$2" w s logf res load1 n m
    for w in $WORKLOADS; do
        for s in $TXN_SIZES; do
            logf="$OUT/r$round-$b-$w-$s.log"
            load1="$(cut -d' ' -f1 /proc/loadavg)"
            n="$RECORDS"
            (( s >= 100 )) || n="$SMALL_TXN_RECORDS"
            if [[ "$w" == produce ]]; then
                if run_tool "$logf" "${TB[@]}" produce "127.0.0.1:$PORT" tb "$s" "$n" "$RECORD_BYTES" \
                    && res="$(grep '^RESULT' "$logf.out")"; then
                    for m in records_per_sec mb_per_sec txn_per_sec commit_p50_ms commit_p99_ms; do
                        row "$round" "$b" 0 produce "$s" "$RECORD_BYTES" "$m" "$(value "$m" "$res")" "$load1"
                    done
                    log "$b produce txn=$s: $res (load $load1)"
                else
                    row "$round" "$b" 0 produce "$s" "$RECORD_BYTES" records_per_sec - "$load1"
                    log "$b produce txn=$s FAILED (see $logf)"
                fi
            else
                if run_tool "$logf" "${TB[@]}" e2e "127.0.0.1:$PORT" tb "$s" "$E2E_SECONDS" \
                    && res="$(grep '^RESULT' "$logf.out")"; then
                    for m in e2e_p50_ms e2e_p99_ms e2e_max_ms; do
                        row "$round" "$b" 0 e2e "$s" 100 "$m" "$(value "$m" "$res")" "$load1"
                    done
                    log "$b e2e txn=$s: $res (load $load1)"
                else
                    row "$round" "$b" 0 e2e "$s" 100 e2e_p50_ms - "$load1"
                    log "$b e2e txn=$s FAILED (see $logf)"
                fi
            fi
        done
    done
}

for round in $(seq 1 "$ROUNDS"); do
    order="$BROKERS"
    if (( round % 2 == 0 )); then order="$(tr ' ' '\n' <<< "$BROKERS" | tac | tr '\n' ' ')"; fi
    for b in $order; do
        start_broker "$b" "$round"
        run_workloads "$round" "$b"
        stop_broker
    done
done
echo "uptime at end: $(uptime)" >> "$OUT/env.txt"
python3 "$ROOT/scripts/bench/groups_summary.py" "$OUT/results.csv" > "$OUT/summary.md"
cat "$OUT/summary.md"
log "results in $OUT"
