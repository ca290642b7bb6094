#!/usr/bin/env bash
# Run Apache Kafka's kafka-dump-log (org.apache.kafka.tools.DumpLogSegments) from the
# Maven Central jars fetched by scripts/kafka-ref.sh. Example:
#   scripts/kafka-dump-log.sh --files DIR/T-0/00000000000000000000.log --deep-iteration
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CP="$("$HERE/kafka-ref.sh" classpath)"
exec java -Xmx512m -cp "$CP" -Dlog4j2.level=WARN org.apache.kafka.tools.DumpLogSegments "$@"
