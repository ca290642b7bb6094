#!/usr/bin/env bash
# A stand-in for the strom binary that runs Apache Kafka 4.4 instead, to validate the
# cross-client tests against the reference implementation through the very same spawn path:
#   STROM_BIN=scripts/kafka-as-strom.sh make test-python test-java
# Understands `server --listen HOST:PORT --data-dir DIR [--set KEY=VALUE]...` (each --set is
# appended to Kafka's server.properties; other flags are ignored). Kafka's
# log.dirs is DIR itself, so partitions are DIR/<topic>-<n>/ as with strom. SIGTERM shuts Kafka
# down cleanly and exits 0, like strom.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ "${1:-}" == server ]] || { echo "kafka-as-strom: only 'server' is supported" >&2; exit 2; }
shift
listen="127.0.0.1:9092" data="./strom-data" extra=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --listen) listen="$2"; shift 2 ;;
        --data-dir) data="$2"; shift 2 ;;
        --set) extra+="$2"$'\n'; shift 2 ;;
        --config|--node-id|--advertised-listener) shift 2 ;;
        *) shift ;;
    esac
done
port="${listen##*:}"
data="$(mkdir -p "$data" && cd "$data" && pwd)"
conf="${data%/}.kafka"
KAFKA_REF_EXTRA_PROPS="$extra" "$HERE/kafka-ref.sh" run "$port" "$conf" "$data" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid || true; exit 0' TERM INT
wait $pid
