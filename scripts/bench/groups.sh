#!/usr/bin/env bash
# Consumer groups: Strom vs Apache Kafka 4.4 on this machine, A/B alternated, the same Java
# client (kafka-clients 4.4) driving both.
#
#   scripts/bench/groups.sh                        ROUNDS=3, every workload
#   ROUNDS=1 MEMBERS=10 STRATEGIES=range WORKLOADS=rebalance scripts/bench/groups.sh   a subset
#
# Per round, for each value of DELAYS (group.initial.rebalance.delay.ms, set equal on both), one
# broker at a time on a fresh data dir (odd rounds Strom first, even rounds Kafka first):
#   setup      GroupBench setup: topic gb (PARTITIONS partitions, 10 records of 100 B in each)
#   rebalance  GroupBench rebalance, for each of MEMBERS x STRATEGIES, a fresh group each:
#              join_ms = first subscribe -> every member owns partitions, together all of them,
#              and has read a record from what it was last given; incr_ms = the same when one
#              more member joins the stable group (scripts/bench/java/GroupBench.java)
#   commit     GroupBench commit, COMMIT_MEMBERS x COMMIT_STRATEGIES: each member loops
#              commitSync() of its partitions for COMMIT_SECONDS; commits/s, p50/p99 latency
#   perf       kafka-consumer-perf-test (org.apache.kafka.tools.ConsumerPerformance, 4.4) with a
#              group over PERF_RECORDS x 1 KiB pre-produced by kafka-producer-perf-test into a
#              1-partition topic; for each of PERF_PROTOCOLS (classic, consumer)
# commit and perf run only with the first value of DELAYS (the delay only matters to a join).
#
# Results: $OUT/results.csv (round,broker,delay_ms,workload,strategy,members,metric,value,load1)
# and $OUT/summary.md (medians, min-max, Strom/Kafka ratios; scripts/bench/groups_summary.py).
# The load (uptime) at the start and end of the run is in $OUT/env.txt. Every process it starts
# is killed by pid on exit, also on failure or Ctrl-C.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS="${ROUNDS:-3}"
DELAYS="${DELAYS:-0 3000}"
WORKLOADS="${WORKLOADS:-rebalance commit perf}"
PARTITIONS="${PARTITIONS:-200}"
MEMBERS="${MEMBERS:-10 100}"
STRATEGIES="${STRATEGIES:-range cooperative-sticky consumer}"
COMMIT_MEMBERS="${COMMIT_MEMBERS:-10 50}"
COMMIT_STRATEGIES="${COMMIT_STRATEGIES:-range consumer}"
COMMIT_SECONDS="${COMMIT_SECONDS:-10}"
PERF_RECORDS="${PERF_RECORDS:-1000000}"
PERF_PROTOCOLS="${PERF_PROTOCOLS:-classic consumer}"
BROKERS="${BROKERS:-strom kafka}"
OUT="${OUT:-/tmp/strom-groups.$(date +%Y%m%d-%H%M%S)}"
STROM_PORT="${STROM_PORT:-39592}"
KAFKA_PORT="${KAFKA_PORT:-39692}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
STROM_BIN="${STROM_BIN:-$TARGET_DIR/release/strom}"
mkdir -p "$OUT"

BENCH_NAME=groups
remove_broker_dir() { [[ -z "${BROKER_DIR:-}" ]] || rm -rf "$BROKER_DIR"; }
CLEANUP_EXTRA=remove_broker_dir
# shellcheck source=scripts/bench/lib.sh
source "$ROOT/scripts/bench/lib.sh"


# --- tools ---------------------------------------------------------------------------------
if [[ -z "${SKIP_BUILD:-}" ]]; then
    log "cargo build --release -p strom"
    (cd "$ROOT" && cargo build --release -p strom >&2)
fi
"$ROOT/scripts/kafka-ref.sh" fetch
CP="$("$ROOT/scripts/kafka-ref.sh" classpath)"
mkdir -p "$OUT/classes"
javac -d "$OUT/classes" -cp "$CP" "$ROOT/scripts/bench/java/GroupBench.java"
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
GB=("${JAVA_TOOL[@]}" -cp "$OUT/classes:$CP" GroupBench)

{
    echo "# groups.sh run $(date -Is)"
    echo "rounds=$ROUNDS delays=$DELAYS workloads=$WORKLOADS partitions=$PARTITIONS"
    echo "members=$MEMBERS strategies=$STRATEGIES"
    echo "commit_members=$COMMIT_MEMBERS commit_strategies=$COMMIT_STRATEGIES commit_seconds=$COMMIT_SECONDS"
    echo "perf_records=$PERF_RECORDS perf_protocols=$PERF_PROTOCOLS"
    echo "strom=$(cd "$ROOT" && git rev-parse --short HEAD) $("$STROM_BIN" --version)"
    nproc; uname -r; grep -m1 'model name' /proc/cpuinfo || true
    echo "uptime at start: $(uptime)"
} > "$OUT/env.txt"

echo "round,broker,delay_ms,workload,strategy,members,metric,value,load1" > "$OUT/results.csv"

# --- brokers -------------------------------------------------------------------------------
BROKER_PID=""
BROKER_DIR=""
PORT=""

start_broker() {
    local b="$1" round="$2" delay="$3"
    for p in "$STROM_PORT" "$KAFKA_PORT" "$((KAFKA_PORT + 1))"; do
        if port_busy "$p"; then log "port $p is in use; set STROM_PORT / KAFKA_PORT"; exit 1; fi
    done
    BROKER_DIR="$(mktemp -d "/tmp/strom-groups-$b-r$round.XXXXXX")"
    if [[ "$b" == strom ]]; then
        PORT="$STROM_PORT"
        RUST_LOG=warn "$STROM_BIN" server --listen "127.0.0.1:$PORT" --data-dir "$BROKER_DIR/data" \
            --set "group.initial.rebalance.delay.ms=$delay" \
            > "$BROKER_DIR/server.log" 2>&1 < /dev/null &
        BROKER_PID=$!
        PIDS+=("$BROKER_PID")
        wait_port "$PORT" "$BROKER_PID"
    else
        PORT="$KAFKA_PORT"
        local attempt
        for attempt in 1 2 3; do
            if BROKER_PID="$(KAFKA_REF_EXTRA_PROPS="group.initial.rebalance.delay.ms=$delay"$'\n' \
                "$ROOT/scripts/kafka-ref.sh" start "$PORT" "$BROKER_DIR")"; then
                break
            fi
            # seen once under load: the JVM exited at start; keep its logs, retry on a fresh dir
            log "kafka did not start (attempt $attempt); logs kept in $OUT/kafka-start-failed-r$round-$attempt"
            mkdir -p "$OUT/kafka-start-failed-r$round-$attempt"
            cp "$BROKER_DIR"/*.log "$OUT/kafka-start-failed-r$round-$attempt/" 2>/dev/null || true
            rm -rf "$BROKER_DIR"
            BROKER_DIR="$(mktemp -d "/tmp/strom-groups-$b-r$round.XXXXXX")"
            BROKER_PID=""
            (( attempt < 3 )) || exit 1
            sleep 5
        done
        PIDS+=("$BROKER_PID")
    fi
    log "$b started (group.initial.rebalance.delay.ms=$delay): pid $BROKER_PID port $PORT dir $BROKER_DIR"
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
    if [[ -n "${KEEP_FAILED:-}" && -n "${FAILED:-}" ]]; then
        log "kept $BROKER_DIR"
    else
        rm -rf "$BROKER_DIR"
    fi
    BROKER_DIR=""
    BROKER_PID=""
    FAILED=""
}

# row ROUND BROKER DELAY WORKLOAD STRATEGY MEMBERS METRIC VALUE LOAD1
row() { local IFS=,; echo "$*" >> "$OUT/results.csv"; }

# cpu_s PID: user+system CPU seconds the process has used (/proc/PID/stat utime+stime)
cpu_s() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' \
        "/proc/$1/stat" 2>/dev/null || echo 0
}
cpu_delta() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# value KEY LINE: the value of KEY=... in a RESULT line
value() { sed -E "s/.* $1=([^ ]+).*/\1/" <<< " $2"; }

# run a java tool in the background so that cleanup can kill it by pid
run_tool() {
    local logf="$1"; shift
    "$@" > "$logf.out" 2> "$logf" < /dev/null &
    local pid=$!
    PIDS+=("$pid")
    wait "$pid"
}

run_rebalance() {
    local round="$1" b="$2" delay="$3" n s logf res load1 cpu0
    for n in $MEMBERS; do
        for s in $STRATEGIES; do
            logf="$OUT/r$round-$b-d$delay-rebalance-$s-$n.log"
            load1="$(cut -d' ' -f1 /proc/loadavg)"
            cpu0="$(cpu_s "$BROKER_PID")"
            if run_tool "$logf" "${GB[@]}" rebalance "127.0.0.1:$PORT" gb "$PARTITIONS" "$n" "$s" \
                "reb-$s-$n" && res="$(grep '^RESULT' "$logf.out")"; then
                row "$round" "$b" "$delay" rebalance "$s" "$n" join_ms "$(value join_ms "$res")" "$load1"
                row "$round" "$b" "$delay" rebalance "$s" "$n" incr_ms "$(value incr_ms "$res")" "$load1"
                row "$round" "$b" "$delay" rebalance "$s" "$n" join_generation "$(value join_gen "$res")" "$load1"
                # the broker's CPU over the whole invocation (warm-up, join, +1, leaving)
                row "$round" "$b" "$delay" rebalance "$s" "$n" broker_cpu_s \
                    "$(cpu_delta "$cpu0" "$(cpu_s "$BROKER_PID")")" "$load1"
                log "$b delay=$delay rebalance $s x$n: join $(value join_ms "$res") ms (generation $(value join_gen "$res")), +1 member $(value incr_ms "$res") ms (load $load1)"
            else
                FAILED=1
                row "$round" "$b" "$delay" rebalance "$s" "$n" join_ms - "$load1"
                row "$round" "$b" "$delay" rebalance "$s" "$n" incr_ms - "$load1"
                log "$b delay=$delay rebalance $s x$n FAILED (see $logf)"
            fi
        done
    done
}

run_commit() {
    local round="$1" b="$2" delay="$3" n s logf res load1 m cpu0 cpu
    for n in $COMMIT_MEMBERS; do
        for s in $COMMIT_STRATEGIES; do
            logf="$OUT/r$round-$b-commit-$s-$n.log"
            load1="$(cut -d' ' -f1 /proc/loadavg)"
            cpu0="$(cpu_s "$BROKER_PID")"
            if run_tool "$logf" "${GB[@]}" commit "127.0.0.1:$PORT" gb "$PARTITIONS" "$n" "$s" \
                "commit-$s-$n" "$COMMIT_SECONDS" && res="$(grep '^RESULT' "$logf.out")"; then
                cpu="$(cpu_delta "$cpu0" "$(cpu_s "$BROKER_PID")")"
                for m in commits_per_sec p50_ms p99_ms failed; do
                    row "$round" "$b" "$delay" commit "$s" "$n" "$m" "$(value "$m" "$res")" "$load1"
                done
                # broker CPU per counted commit; it includes the warm-up and join (small)
                row "$round" "$b" "$delay" commit "$s" "$n" broker_cpu_us_per_commit \
                    "$(awk -v c="$cpu" -v n="$(value commits "$res")" 'BEGIN { printf "%.1f", (n > 0 ? c * 1e6 / n : 0) }')" "$load1"
                log "$b commit $s x$n: $(value commits_per_sec "$res") commits/s p50 $(value p50_ms "$res") ms p99 $(value p99_ms "$res") ms (load $load1)"
            else
                FAILED=1
                row "$round" "$b" "$delay" commit "$s" "$n" commits_per_sec - "$load1"
                log "$b commit $s x$n FAILED (see $logf)"
            fi
        done
    done
}

run_perf() {
    local round="$1" b="$2" delay="$3" proto logf line load1 cpu0 bs="127.0.0.1:$PORT"
    logf="$OUT/r$round-$b-perf-produce.log"
    "$STROM_BIN" topics create --topic perf --partitions 1 --replication-factor 1 \
        --bootstrap-server "$bs" > /dev/null
    run_tool "$logf" "${JAVA_TOOL[@]}" -cp "$CP" org.apache.kafka.tools.ProducerPerformance \
        --topic perf --num-records "$PERF_RECORDS" --record-size 1024 --throughput -1 \
        --producer-props acks=1 enable.idempotence=false "bootstrap.servers=$bs" || true
    log "$b pre-produce: $(grep 'records sent' "$logf.out" | tail -1 | cut -d, -f1-2)"
    for proto in $PERF_PROTOCOLS; do
        logf="$OUT/r$round-$b-perf-$proto.log"
        load1="$(cut -d' ' -f1 /proc/loadavg)"
        cpu0="$(cpu_s "$BROKER_PID")"
        # the header, then "start, end, MB, MB.sec, nMsg, nMsg.sec, rebalance.time.ms,
        # fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec" (MB = MiB here)
        if run_tool "$logf" "${JAVA_TOOL[@]}" -cp "$CP" org.apache.kafka.tools.ConsumerPerformance \
            --bootstrap-server "$bs" --topic perf --num-records "$PERF_RECORDS" \
            --group "perf-$proto" --timeout 30000 --command-property "group.protocol=$proto" &&
            line="$(grep -A1 '^start.time' "$logf.out" | tail -1)" && [[ -n "$line" ]]; then
            IFS=, read -r _ _ mib mibs nmsg nmsgs reb fetchms fetchmibs _ <<< "$line"
            row "$round" "$b" "$delay" perf "$proto" 1 mb_per_sec \
                "$(awk -v x="$mibs" 'BEGIN { printf "%.1f", x * 1.048576 }')" "$load1"
            row "$round" "$b" "$delay" perf "$proto" 1 fetch_mb_per_sec \
                "$(awk -v x="$fetchmibs" 'BEGIN { printf "%.1f", x * 1.048576 }')" "$load1"
            row "$round" "$b" "$delay" perf "$proto" 1 rebalance_ms "$(tr -d ' ' <<< "$reb")" "$load1"
            row "$round" "$b" "$delay" perf "$proto" 1 records "$(tr -d ' ' <<< "$nmsg")" "$load1"
            row "$round" "$b" "$delay" perf "$proto" 1 broker_cpu_s \
                "$(cpu_delta "$cpu0" "$(cpu_s "$BROKER_PID")")" "$load1"
            log "$b consumer-perf-test $proto: $line (load $load1)"
        else
            FAILED=1
            row "$round" "$b" "$delay" perf "$proto" 1 mb_per_sec - "$load1"
            log "$b consumer-perf-test $proto FAILED (see $logf)"
        fi
    done
}

# --- rounds --------------------------------------------------------------------------------
first_delay="${DELAYS%% *}"
for round in $(seq 1 "$ROUNDS"); do
    order="$BROKERS"
    if (( round % 2 == 0 )); then order="$(echo "$BROKERS" | tr ' ' '\n' | tac | tr '\n' ' ')"; fi
    for delay in $DELAYS; do
        for b in $order; do
            start_broker "$b" "$round" "$delay"
            if ! run_tool "$OUT/r$round-$b-d$delay-setup.log" "${GB[@]}" setup "127.0.0.1:$PORT" gb \
                "$PARTITIONS" 10; then
                log "$b setup FAILED (see $OUT/r$round-$b-d$delay-setup.log)"
                FAILED=1
                stop_broker
                continue
            fi
            for w in $WORKLOADS; do
                case "$w" in
                rebalance) run_rebalance "$round" "$b" "$delay" ;;
                commit) [[ "$delay" == "$first_delay" ]] && run_commit "$round" "$b" "$delay" ;;
                perf) [[ "$delay" == "$first_delay" ]] && run_perf "$round" "$b" "$delay" ;;
                *) log "unknown workload $w"; exit 1 ;;
                esac
            done
            stop_broker
        done
    done
done

echo "uptime at end: $(uptime)" >> "$OUT/env.txt"
python3 "$ROOT/scripts/bench/groups_summary.py" "$OUT/results.csv" > "$OUT/summary.md"
cat "$OUT/env.txt" "$OUT/summary.md"
log "results in $OUT"
