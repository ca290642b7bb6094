#!/usr/bin/env bash
# Log cleaner: Strom vs Apache Kafka 4.4 on this machine, one node each, the same Java producer
# (kafka-clients 4.4, scripts/bench/java/CleanerBench.java) and the same topic configs.
#
#   scripts/bench/cleaner.sh                          ROUNDS=1, 1000 MB over 100k keys
#   ROUNDS=3 LOAD_MB=300 scripts/bench/cleaner.sh     smaller, more rounds
#
# Per round, one broker at a time on a fresh data dir (odd rounds Strom first, even Kafka
# first), brokers with log.cleaner.backoff.ms=$BACKOFF_MS (other cleaner settings default: one
# thread, 128 MiB dedupe buffer, no I/O limit), one compacted partition (segment.bytes
# $SEGMENT_BYTES):
#   load    LOAD_MB of values (RECORD_BYTES each) over KEYS keys, min.compaction.lag.ms one day so
#           that nothing is cleanable yet: produce MB/s without the cleaner
#   clean   min.compaction.lag.ms set to 0 (IncrementalAlterConfigs): the time from its answer
#           until the cleaner checkpoint reaches the active segment (polled every 20 ms);
#           cleaner MB/s = dirty bytes (every segment but the active one) / that time; the
#           log's size before and after; Kafka's own "MB of log processed" figure too
#   pwc     produce for PWC_SECONDS with the cleaner running (dirty ratio 0.5 is passed again
#           and again): produce MB/s while cleaning, cleaner checkpoint moves seen, the log's
#           size at the end
# Broker RSS (VmRSS) is sampled every second: peak per phase.
#
# Results: $OUT/results.csv (round,broker,metric,value) and $OUT/summary.md (medians). Every
# process it starts is killed by pid on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${ROUNDS:-1}"
LOAD_MB="${LOAD_MB:-1000}"
KEYS="${KEYS:-100000}"
RECORD_BYTES="${RECORD_BYTES:-1000}"
PWC_SECONDS="${PWC_SECONDS:-30}"
SEGMENT_BYTES="${SEGMENT_BYTES:-67108864}"
BACKOFF_MS="${BACKOFF_MS:-200}"
CLEAN_TIMEOUT="${CLEAN_TIMEOUT:-900}"
BROKERS="${BROKERS:-strom kafka}"
OUT="${OUT:-/tmp/strom-cleaner.$(date +%Y%m%d-%H%M%S)}"
STROM_PORT="${STROM_PORT:-29792}"
KAFKA_PORT="${KAFKA_PORT:-29892}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
STROM_BIN="${STROM_BIN:-$TARGET_DIR/release/strom}"
TOPIC=ct
mkdir -p "$OUT"

BENCH_NAME=cleaner
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
javac -d "$OUT/classes" -cp "$CP" "$ROOT/scripts/bench/java/CleanerBench.java"
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
CB=("${JAVA_TOOL[@]}" -cp "$OUT/classes:$CP" CleanerBench)
TOPICS=("${JAVA_TOOL[@]}" -cp "$CP" org.apache.kafka.tools.TopicCommand)

{
    echo "# cleaner.sh run $(date -Is)"
    echo "rounds=$ROUNDS load_mb=$LOAD_MB keys=$KEYS record_bytes=$RECORD_BYTES pwc_seconds=$PWC_SECONDS"
    echo "segment_bytes=$SEGMENT_BYTES backoff_ms=$BACKOFF_MS"
    echo "strom=$(cd "$ROOT" && git rev-parse --short HEAD) $("$STROM_BIN" --version)"
    nproc; uname -r; grep -m1 'model name' /proc/cpuinfo || true
    echo "uptime at start: $(uptime)"
} > "$OUT/env.txt"
echo "round,broker,metric,value" > "$OUT/results.csv"

BROKER_PID=""
BROKER_DIR=""
LOG_DIR=""
PORT=""
SAMPLER_PID=""

row() { local IFS=,; echo "$*" >> "$OUT/results.csv"; }
value() { sed -E "s/.* $1=([^ ]+).*/\1/" <<< " $2"; }
run_tool() {
    local logf="$1"; shift
    "$@" > "$logf.out" 2> "$logf" < /dev/null &
    local pid=$!
    PIDS+=("$pid")
    wait "$pid"
}

# The partition's segments: "ACTIVE_BASE DIRTY_BYTES TOTAL_BYTES" (.log files only; dirty =
# every segment but the active one).
seg_state() {
    local d="$LOG_DIR/$TOPIC-0" f base last=-1 size total=0 lastsize=0
    for f in "$d"/*.log; do
        [[ -e "$f" ]] || continue
        base="$(basename "$f" .log)"
        size="$(stat -c %s "$f" 2>/dev/null || echo 0)" # the cleaner may have removed it
        total=$((total + size))
        if (( 10#$base > last )); then last=$((10#$base)); lastsize="$size"; fi
    done
    echo "$last $((total - lastsize)) $total"
}

checkpoint() {
    awk -v t="$TOPIC" '$1 == t && $2 == 0 { print $3 }' \
        "$LOG_DIR/cleaner-offset-checkpoint" 2>/dev/null || true
}

# One line per second: epoch_ms rss_kb checkpoint
start_sampler() {
    local f="$1"
    (
        while kill -0 "$BROKER_PID" 2>/dev/null; do
            echo "$(date +%s%3N) $(awk '/^VmRSS/ {print $2}' "/proc/$BROKER_PID/status" 2>/dev/null || echo 0) $(checkpoint)"
            sleep 1
        done
    ) > "$f" &
    SAMPLER_PID=$!
    PIDS+=("$SAMPLER_PID")
}

# peak_rss FILE FROM_MS TO_MS -> MB
peak_rss() {
    awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b && $2 > m { m = $2 } END { printf "%.0f", m / 1024 }' "$1"
}

# checkpoint_moves FILE FROM_MS TO_MS -> how often the cleaner checkpoint changed
checkpoint_moves() {
    awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b && NF >= 3 { if (seen && $3 != prev) n++; prev = $3; seen = 1 } END { print n + 0 }' "$1"
}

now_ms() { date +%s%3N; }

start_broker() {
    local b="$1" round="$2"
    for p in "$STROM_PORT" "$KAFKA_PORT" "$((KAFKA_PORT + 1))"; do
        if port_busy "$p"; then log "port $p is in use; set STROM_PORT / KAFKA_PORT"; exit 1; fi
    done
    BROKER_DIR="$(mktemp -d "/tmp/strom-cleaner-$b-r$round.XXXXXX")"
    LOG_DIR="$BROKER_DIR/data"
    if [[ "$b" == strom ]]; then
        PORT="$STROM_PORT"
        RUST_LOG="${STROM_RUST_LOG:-info}" "$STROM_BIN" server --listen "127.0.0.1:$PORT" \
            --data-dir "$LOG_DIR" --set "log.cleaner.backoff.ms=$BACKOFF_MS" \
            > "$BROKER_DIR/server.log" 2>&1 < /dev/null &
        BROKER_PID=$!
        PIDS+=("$BROKER_PID")
        wait_port "$PORT" "$BROKER_PID"
    else
        PORT="$KAFKA_PORT"
        BROKER_PID="$(KAFKA_REF_EXTRA_PROPS="log.cleaner.backoff.ms=$BACKOFF_MS"$'\n' \
            "$ROOT/scripts/kafka-ref.sh" start "$PORT" "$BROKER_DIR")"
        PIDS+=("$BROKER_PID")
    fi
    run_tool "$OUT/r$round-$b-topic.log" "${TOPICS[@]}" --bootstrap-server "127.0.0.1:$PORT" \
        --create --topic "$TOPIC" --partitions 1 --replication-factor 1 \
        --config cleanup.policy=compact --config "segment.bytes=$SEGMENT_BYTES" \
        --config min.compaction.lag.ms=86400000
    start_sampler "$OUT/r$round-$b-samples.txt"
    log "$b started: pid $BROKER_PID port $PORT dir $BROKER_DIR"
}

stop_broker() {
    if [[ -n "$BROKER_PID" ]]; then
        cp "$BROKER_DIR/server.log" "$OUT/r$ROUND-$B-server.log" 2>/dev/null || true
        kill -TERM "$BROKER_PID" 2>/dev/null || true
        for _ in $(seq 1 300); do
            kill -0 "$BROKER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
    fi
    [[ -z "$SAMPLER_PID" ]] || { kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; }
    SAMPLER_PID=""
    rm -rf "$BROKER_DIR"
    BROKER_DIR=""
    BROKER_PID=""
}

run_round() {
    local round="$1" b="$2" logf res t0 t1 t2 t3 t4 secs active dirty total after samples
    samples="$OUT/r$round-$b-samples.txt"

    # load: nothing is cleanable (min.compaction.lag.ms one day)
    logf="$OUT/r$round-$b-load.log"
    t0="$(now_ms)"
    run_tool "$logf" "${CB[@]}" produce "127.0.0.1:$PORT" "$TOPIC" "$LOAD_MB" 0 "$KEYS" \
        "$RECORD_BYTES" "$round"
    t1="$(now_ms)"
    res="$(grep '^RESULT' "$logf.out")"
    row "$round" "$b" load_mb_per_sec "$(value mb_per_sec "$res")"
    row "$round" "$b" load_peak_rss_mb "$(peak_rss "$samples" "$t0" "$t1")"
    log "$b load: $res"

    # clean: make everything but the active segment cleanable, time the cleaner to it
    read -r active dirty total <<< "$(seg_state)"
    row "$round" "$b" dirty_mb "$(awk -v d="$dirty" 'BEGIN { printf "%.1f", d / 1e6 }')"
    t2="$(now_ms)"
    run_tool "$OUT/r$round-$b-clean.log" "${CB[@]}" clean "127.0.0.1:$PORT" "$TOPIC" \
        "$LOG_DIR/cleaner-offset-checkpoint" "$active" "$CLEAN_TIMEOUT" || true
    t3="$(now_ms)"
    secs="$(value seconds "$(grep '^RESULT' "$OUT/r$round-$b-clean.log.out" || echo 'RESULT seconds=failed')")"
    read -r _ _ after <<< "$(seg_state)"
    if [[ "$secs" =~ ^[0-9.]+$ ]]; then
        row "$round" "$b" clean_seconds "$secs"
        row "$round" "$b" clean_mb_per_sec "$(awk -v d="$dirty" -v s="$secs" 'BEGIN { printf "%.2f", d / 1e6 / s }')"
    else
        row "$round" "$b" clean_seconds "$secs"
        row "$round" "$b" clean_mb_per_sec -
    fi
    row "$round" "$b" log_mb_before "$(awk -v d="$total" 'BEGIN { printf "%.1f", d / 1e6 }')"
    row "$round" "$b" log_mb_after "$(awk -v d="$after" 'BEGIN { printf "%.1f", d / 1e6 }')"
    row "$round" "$b" clean_peak_rss_mb "$(peak_rss "$samples" "$t2" "$t3")"
    log "$b clean: dirty $dirty B in $secs s; log $total -> $after B"
    # The broker's own account of that clean (its first), for comparison with the time above:
    # Kafka logs "X MB of log processed in S seconds (R MB/sec)" in MiB, Strom logs
    # "cleaned log ... read_bytes=B ... elapsed_ms=T"; both as MB/s here.
    if [[ "$b" == kafka ]]; then
        { grep -h 'MB of log processed in' "$BROKER_DIR/server.log" || true; } | head -1 \
            | sed -E 's/.*processed in [0-9.]+ seconds \(([0-9.]+) MB\/sec\).*/\1/' \
            | { read -r r && row "$round" "$b" clean_self_reported_mb_per_sec \
                "$(awk -v r="$r" 'BEGIN { printf "%.1f", r * 1.048576 }')" || true; }
    else
        sed -E 's/\x1b\[[0-9;]*m//g' "$BROKER_DIR/server.log" | { grep -h 'cleaned log' || true; } | head -1 \
            | sed -E 's/.*read_bytes=([0-9]+).*elapsed_ms=([0-9]+).*/\1 \2/' \
            | { read -r by ms && row "$round" "$b" clean_self_reported_mb_per_sec \
                "$(awk -v b="$by" -v t="$ms" 'BEGIN { printf "%.1f", b / 1e6 / (t / 1000) }')" || true; }
    fi

    # pwc: produce while the cleaner runs
    logf="$OUT/r$round-$b-pwc.log"
    t3="$(now_ms)"
    run_tool "$logf" "${CB[@]}" produce "127.0.0.1:$PORT" "$TOPIC" 1000000 "$PWC_SECONDS" \
        "$KEYS" "$RECORD_BYTES" "$((round + 100))"
    t4="$(now_ms)"
    res="$(grep '^RESULT' "$logf.out")"
    row "$round" "$b" pwc_mb_per_sec "$(value mb_per_sec "$res")"
    row "$round" "$b" pwc_cleanings "$(checkpoint_moves "$samples" "$t3" "$t4")"
    row "$round" "$b" pwc_peak_rss_mb "$(peak_rss "$samples" "$t3" "$t4")"
    read -r _ _ after <<< "$(seg_state)"
    row "$round" "$b" pwc_log_mb_at_end "$(awk -v d="$after" 'BEGIN { printf "%.1f", d / 1e6 }')"
    log "$b produce while cleaning: $res, $(checkpoint_moves "$samples" "$t3" "$t4") checkpoint moves"
}

for ROUND in $(seq 1 "$ROUNDS"); do
    order="$BROKERS"
    if (( ROUND % 2 == 0 )); then order="$(tr ' ' '\n' <<< "$BROKERS" | tac | tr '\n' ' ')"; fi
    for B in $order; do
        start_broker "$B" "$ROUND"
        run_round "$ROUND" "$B"
        stop_broker
    done
done
echo "uptime at end: $(uptime)" >> "$OUT/env.txt"
python3 - "$OUT/results.csv" > "$OUT/summary.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
brokers = sorted({r["broker"] for r in rows}, key=lambda b: (b != "strom", b))
metrics = list(dict.fromkeys(r["metric"] for r in rows))
def med(b, m):
    xs = []
    for r in rows:
        if r["broker"] == b and r["metric"] == m:
            try:
                xs.append(float(r["value"]))
            except ValueError:
                return r["value"]
    return f"{statistics.median(xs):g}" if xs else "-"
print("| metric | " + " | ".join(brokers) + " |")
print("|---|" + "---|" * len(brokers))
for m in metrics:
    print(f"| {m} | " + " | ".join(med(b, m) for b in brokers) + " |")
PY
cat "$OUT/summary.md"
log "results in $OUT"
