#!/usr/bin/env bash
# Strom vs Apache Kafka 4.4 on this machine, A/B alternated, identical work.
#
#   scripts/bench/compare.sh                      ROUNDS=3 RECORDS=1000000 by default
#   ROUNDS=5 RECORDS=2000000 scripts/bench/compare.sh
#   WORKLOADS="rdk-p-acks1 rdk-c" scripts/bench/compare.sh     a subset
#
# Each round starts one broker at a time on a fresh data dir (Strom: target/release/strom server;
# Kafka: scripts/kafka-ref.sh, a single KRaft node), runs every workload against it, records the
# broker's RSS (idle, and sampled every 0.5 s while the log grows), and stops it. Odd rounds run
# Strom first, even rounds Kafka first. Workloads (1 partition, 1 KiB records, RECORDS records,
# a fresh topic each):
#   rdk-p-acks1     rdkafka_performance -P -s 1024 -a 1 -X linger.ms=5   (librdkafka 2.12.1)
#   rdk-p-acksall   rdkafka_performance -P -s 1024 -a -1 -X linger.ms=5
#   rdk-c           rdkafka_performance -C -o beginning        (reads what rdk-p-acks1 wrote)
#   java-p-acks1    kafka-producer-perf-test (ProducerPerformance, kafka-tools 4.4) acks=1
#   strom-p-acks1   strom bench produce --acks 1
#   strom-c         strom bench consume                        (reads what rdk-p-acks1 wrote)
#
# BROKERS="strom strom-before kafka" with STROM_BEFORE_BIN=path adds an older Strom build as a
# third broker in the same alternation (before/after a change, against Kafka in one run).
#
# Results: $OUT/results.csv (one row per run) and $OUT/summary.md (medians and Strom/Kafka
# ratios; with APPEND_LIMIT / TCP_LIMIT in MB/s also the fraction of those machine limits);
# OUT defaults to /tmp/strom-bench.<time>. Every process it starts is killed by pid on
# exit, also on failure or Ctrl-C.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${ROUNDS:-3}"
RECORDS="${RECORDS:-1000000}"
SIZE=1024
WORKLOADS="${WORKLOADS:-rdk-p-acks1 rdk-p-acksall rdk-c java-p-acks1 strom-p-acks1 strom-c}"
BROKERS="${BROKERS:-strom kafka}"
OUT="${OUT:-/tmp/strom-bench.$(date +%Y%m%d-%H%M%S)}"
STROM_PORT="${STROM_PORT:-39092}"
KAFKA_PORT="${KAFKA_PORT:-39192}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
STROM_BIN="${STROM_BIN:-$TARGET_DIR/release/strom}"
STROM_BEFORE_BIN="${STROM_BEFORE_BIN:-}"
mkdir -p "$OUT"

BENCH_NAME=compare
# shellcheck source=scripts/bench/lib.sh
source "$ROOT/scripts/bench/lib.sh"


# --- tools ---------------------------------------------------------------------------------
if [[ -z "${SKIP_BUILD:-}" ]]; then
    log "cargo build --release -p strom"
    (cd "$ROOT" && cargo build --release -p strom >&2)
fi
RDPERF="$("$ROOT/scripts/bench/build-rdkafka-perf.sh")"
"$ROOT/scripts/kafka-ref.sh" fetch
CP="$("$ROOT/scripts/kafka-ref.sh" classpath)"
# log4j config for the Java tools: warnings only, to stderr
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

{
    echo "# compare.sh run $(date -Is)"
    echo "rounds=$ROUNDS records=$RECORDS size=$SIZE workloads=$WORKLOADS"
    echo "strom=$(cd "$ROOT" && git rev-parse --short HEAD) $("$STROM_BIN" --version)"
    echo "rdkafka_performance=$RDPERF"
    nproc; uname -r; grep -m1 'model name' /proc/cpuinfo || true
} > "$OUT/env.txt"

echo "round,broker,workload,records_per_sec,mb_per_sec,p50_ms,p99_ms,p999_ms,rss_idle_kb,rss_max_kb,rss_end_kb,load1" > "$OUT/results.csv"

# --- brokers -------------------------------------------------------------------------------
BROKER_PID=""
BROKER_DIR=""
PORT=""

start_broker() {
    local b="$1" round="$2"
    for p in "$STROM_PORT" "$KAFKA_PORT" "$((KAFKA_PORT + 1))"; do
        if port_busy "$p"; then log "port $p is in use; set STROM_PORT / KAFKA_PORT"; exit 1; fi
    done
    BROKER_DIR="$(mktemp -d "/tmp/strom-bench-$b-r$round.XXXXXX")"
    if [[ "$b" == strom || "$b" == strom-before ]]; then
        local bin="$STROM_BIN"
        if [[ "$b" == strom-before ]]; then
            [[ -x "$STROM_BEFORE_BIN" ]] || { log "strom-before needs STROM_BEFORE_BIN"; exit 1; }
            bin="$STROM_BEFORE_BIN"
        fi
        PORT="$STROM_PORT"
        RUST_LOG=warn "$bin" server --listen "127.0.0.1:$PORT" --data-dir "$BROKER_DIR/data" \
            > "$BROKER_DIR/server.log" 2>&1 < /dev/null &
        BROKER_PID=$!
        PIDS+=("$BROKER_PID")
        wait_port "$PORT" "$BROKER_PID"
    else
        PORT="$KAFKA_PORT"
        BROKER_PID="$("$ROOT/scripts/kafka-ref.sh" start "$PORT" "$BROKER_DIR")"
        PIDS+=("$BROKER_PID")
    fi
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
    BROKER_PID=""
}

rss_kb() { ps -o rss= -p "$1" 2>/dev/null | tr -d ' ' || echo 0; }

# sample RSS every 0.5 s into $1 while the broker lives
SAMPLER_PID=""
start_sampler() {
    local file="$1" pid="$BROKER_PID"
    ( while kill -0 "$pid" 2>/dev/null; do rss_kb "$pid" >> "$file"; sleep 0.5; done ) &
    SAMPLER_PID=$!
    PIDS+=("$SAMPLER_PID")
}
stop_sampler() {
    [[ -n "$SAMPLER_PID" ]] && kill "$SAMPLER_PID" 2>/dev/null || true
    wait "$SAMPLER_PID" 2>/dev/null || true
    SAMPLER_PID=""
}

create_topic() {
    "$STROM_BIN" topics create --topic "$1" --partitions 1 --replication-factor 1 \
        --bootstrap-server "127.0.0.1:$PORT" > /dev/null
}

# --- workloads: each prints "records_per_sec mb_per_sec p50 p99 p999" (MB = 10^6 bytes) -----
run_workload() {
    local w="$1" logf="$2" bs="127.0.0.1:$PORT"
    case "$w" in
    rdk-p-acks1|rdk-p-acksall)
        local acks=1 topic=rdk-acks1
        [[ "$w" == rdk-p-acksall ]] && { acks=-1; topic=rdk-acksall; }
        create_topic "$topic"
        # rdkafka_performance sets linger.ms=1000, which adds a fixed ~1 s tail (the last
        # partial batch waits) to every run; librdkafka's own default is 5.
        "$RDPERF" -P -t "$topic" -p 0 -b "$bs" -s "$SIZE" -c "$RECORDS" -a "$acks" \
            -X linger.ms=5 > "$logf" 2>&1
        # "% N messages produced (B bytes), D delivered (...) in T ms: X msgs/s and Y MB/s, ..."
        grep 'messages produced' "$logf" | tail -1 |
            sed -E 's/.* ([0-9]+) msgs\/s and ([0-9.]+) MB\/s.*/\1 \2 - - -/'
        ;;
    rdk-c)
        "$RDPERF" -C -t rdk-acks1 -p 0 -b "$bs" -o beginning -c "$RECORDS" > "$logf" 2>&1
        # "% N messages (B bytes) consumed in T ms: X msgs/s (Y MB/s)"
        grep 'consumed in' "$logf" | tail -1 |
            sed -E 's/.* ([0-9]+) msgs\/s \(([0-9.]+) MB\/s\).*/\1 \2 - - -/'
        ;;
    java-p-acks1)
        create_topic java-acks1
        java -Xmx512m "-Dlog4j2.configurationFile=$OUT/tools-log4j2.properties" -cp "$CP" \
            org.apache.kafka.tools.ProducerPerformance --topic java-acks1 \
            --num-records "$RECORDS" --record-size "$SIZE" --throughput -1 \
            --producer-props acks=1 enable.idempotence=false "bootstrap.servers=$bs" \
            > "$logf" 2>&1
        # "N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency,
        #  P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."  (MB = MiB here)
        grep 'records sent' "$logf" | tail -1 | sed -E \
            's/.*records sent, ([0-9.]+) records\/sec \(([0-9.]+) MB\/sec\).* ([0-9.]+) ms 50th, [0-9.]+ ms 95th, ([0-9.]+) ms 99th, ([0-9.]+) ms 99.9th.*/\1 \2 \3 \4 \5/' |
            awk '{ printf "%.0f %.1f %s %s %s\n", $1, $2 * 1.048576, $3, $4, $5 }'
        ;;
    strom-p-acks1)
        "$STROM_BIN" bench produce --bootstrap-server "$bs" --topic strom-acks1 \
            --records "$RECORDS" --record-size "$SIZE" --acks 1 --no-progress > "$logf" 2>&1
        grep '^RESULT' "$logf" | sed -E \
            's/.*records_per_sec=([0-9.]+) mb_per_sec=([0-9.]+) lat_p50_ms=([0-9.]+) lat_p99_ms=([0-9.]+) lat_p999_ms=([0-9.]+).*/\1 \2 \3 \4 \5/'
        ;;
    strom-c)
        "$STROM_BIN" bench consume --bootstrap-server "$bs" --topic rdk-acks1 \
            --records "$RECORDS" --no-progress > "$logf" 2>&1
        grep '^RESULT' "$logf" | sed -E \
            's/.*records_per_sec=([0-9.]+) mb_per_sec=([0-9.]+).*/\1 \2 - - -/'
        ;;
    *) log "unknown workload $w"; return 1 ;;
    esac
}

# --- rounds --------------------------------------------------------------------------------
for round in $(seq 1 "$ROUNDS"); do
    order="$BROKERS"
    if (( round % 2 == 0 )); then order="$(echo "$BROKERS" | tr ' ' '\n' | tac | tr '\n' ' ')"; fi
    for b in $order; do
        start_broker "$b" "$round"
        sleep 3
        idle="$(rss_kb "$BROKER_PID")"
        log "$b idle RSS ${idle} kB"
        for w in $WORKLOADS; do
            samples="$OUT/rss-r$round-$b-$w.txt"
            : > "$samples"
            start_sampler "$samples"
            logf="$OUT/r$round-$b-$w.log"
            # the 1-minute load average before the run: other work on this machine shows here
            load1="$(cut -d' ' -f1 /proc/loadavg)"
            if res="$(run_workload "$w" "$logf")" && [[ -n "$res" ]]; then
                :
            else
                log "$b $w FAILED (see $logf)"; res="- - - - -"
            fi
            stop_sampler
            end="$(rss_kb "$BROKER_PID")"
            max="$(sort -n "$samples" | tail -1)"
            read -r rps mbps p50 p99 p999 <<< "$res"
            echo "$round,$b,$w,$rps,$mbps,$p50,$p99,$p999,$idle,${max:-0},$end,$load1" >> "$OUT/results.csv"
            log "$b $w: $rps rec/s $mbps MB/s p50=$p50 p99=$p99 p99.9=$p999 rss max ${max:-0} kB end $end kB load $load1"
        done
        du -sh "$BROKER_DIR" | awk '{print "  data: " $1}' >&2
        stop_broker
    done
done

python3 "$ROOT/scripts/bench/summarize.py" "$OUT/results.csv" \
    ${APPEND_LIMIT:+--append-limit "$APPEND_LIMIT"} ${TCP_LIMIT:+--tcp-limit "$TCP_LIMIT"} > "$OUT/summary.md"
cat "$OUT/summary.md"
log "results in $OUT"
