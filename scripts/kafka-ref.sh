#!/usr/bin/env bash
# Apache Kafka 4.4.0 reference broker, built from Maven Central artifacts.
#
#   scripts/kafka-ref.sh fetch                 download the jars into .cache/kafka-4.4/libs
#   scripts/kafka-ref.sh start PORT [DIR]      start a single KRaft combined node on 127.0.0.1:PORT,
#                                              data in DIR (default: a new temp dir); prints its pid
#   scripts/kafka-ref.sh run PORT DIR [LOGDIRS] the same in the foreground (exec java)
#   scripts/kafka-ref.sh stop PID              SIGTERM, then SIGKILL after 20 s
#   scripts/kafka-ref.sh classpath             print the classpath (for other scripts)
#
# The controller listens on PORT+1. Logs go to DIR/server.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
CACHE="${KAFKA_REF_CACHE:-$ROOT/.cache/kafka-${KAFKA_VERSION%.*}}"
LIBS="$CACHE/libs"

fetch() {
    if [[ -f "$LIBS/.complete" ]]; then return 0; fi
    mkdir -p "$CACHE"
    cat > "$CACHE/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.strom</groupId>
  <artifactId>kafka-ref-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-storage</artifactId><version>${KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
    rm -rf "$LIBS"
    mvn -q -B -f "$CACHE/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$LIBS" -DincludeScope=runtime >&2
    touch "$LIBS/.complete"
}

classpath() {
    fetch
    local cp
    cp="$(ls "$LIBS"/*.jar | tr '\n' ':')"
    echo "${cp%:}"
}

log4j_config() {
    # $1 = directory that receives log4j2.yaml
    cat > "$1/log4j2.properties" <<L4J
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $1/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
L4J
}

# prepare PORT DIR [LOGDIRS]: write DIR/server.properties and format LOGDIRS (default DIR/data)
prepare() {
    local port="$1" dir="$2" logdirs="${3:-$2/data}"
    mkdir -p "$dir" "$logdirs"
    local cport=$((port + 1))
    log4j_config "$dir"
    cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:${cport}
listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${cport}
advertised.listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${cport}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=${logdirs}
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
PROPS
    # extra KEY=VALUE lines (scripts/kafka-as-strom.sh passes its --set flags); later lines win
    printf '%s' "${KAFKA_REF_EXTRA_PROPS:-}" >> "$dir/server.properties"
    if [[ ! -f "$logdirs/meta.properties" ]]; then
        java -Xmx256m "-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$CP" \
            kafka.tools.StorageTool format --standalone \
            -t "$(java -cp "$CP" kafka.tools.StorageTool random-uuid)" \
            -c "$dir/server.properties" > "$dir/format.log" 2>&1 \
            || { cat "$dir/format.log" >&2; exit 1; }
    fi
}

JAVA_OPTS=(-Xmx512m -Xms256m -XX:+UseG1GC)

# run PORT DIR [LOGDIRS]: run the broker in the foreground (logs in DIR/server.log)
run() {
    local port="${1:?usage: kafka-ref.sh run PORT DIR [LOGDIRS]}" dir="${2:?}"
    CP="$(classpath)"
    prepare "$port" "$dir" "${3:-}"
    exec java "${JAVA_OPTS[@]}" "-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$CP" \
        kafka.Kafka "$dir/server.properties"
}

start() {
    local port="${1:?usage: kafka-ref.sh start PORT [DIR]}"
    local dir="${2:-}"
    if [[ -z "$dir" ]]; then dir="$(mktemp -d /tmp/kafka-ref.XXXXXX)"; fi
    CP="$(classpath)"
    prepare "$port" "$dir"
    nohup java "${JAVA_OPTS[@]}" "-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$CP" \
        kafka.Kafka "$dir/server.properties" > "$dir/stdout.log" 2>&1 < /dev/null &
    local pid=$!
    echo "$pid" > "$dir/pid"
    # wait until the port accepts connections
    for _ in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "kafka-ref: pid $pid listening on 127.0.0.1:$port, dir $dir" >&2
            echo "$pid"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "kafka-ref: broker exited; see $dir/stdout.log and $dir/server.log" >&2
            tail -30 "$dir/stdout.log" >&2 || true
            exit 1
        fi
        sleep 0.1
    done
    echo "kafka-ref: broker did not open port $port within 60 s" >&2
    kill -9 "$pid" 2>/dev/null || true
    exit 1
}

stop() {
    local pid="${1:?usage: kafka-ref.sh stop PID}"
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 200); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

cmd="${1:-}"; shift || true
case "$cmd" in
    fetch) fetch ;;
    classpath) classpath ;;
    start) start "$@" ;;
    run) run "$@" ;;
    stop) stop "$@" ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
