#!/usr/bin/env bash
# Build librdkafka's rdkafka_performance from the librdkafka source vendored in the rdkafka-sys
# crate (the same librdkafka the Rust tests use). Nothing is downloaded; the build happens in a
# scratch directory and nothing of it is committed.
#
#   scripts/bench/build-rdkafka-perf.sh        prints the path of the built binary
#
# Env: RDKAFKA_SYS_VERSION (default 4.10.0+2.12.1), RDKAFKA_PERF_DIR (default /tmp/strom-rdkafka-perf)
set -euo pipefail

VERSION="${RDKAFKA_SYS_VERSION:-4.10.0+2.12.1}"
OUT="${RDKAFKA_PERF_DIR:-/tmp/strom-rdkafka-perf}"
BIN="$OUT/librdkafka/examples/rdkafka_performance"

if [[ -x "$BIN" ]]; then echo "$BIN"; exit 0; fi

SRC=""
for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/rdkafka-sys-"$VERSION"/librdkafka; do
    if [[ -d "$d" ]]; then SRC="$d"; break; fi
done
if [[ -z "$SRC" ]]; then
    echo "build-rdkafka-perf: rdkafka-sys-$VERSION not in the cargo registry;" \
         "run 'cargo fetch' (the strom crate's dev-dependency rdkafka pulls it)" >&2
    exit 1
fi

mkdir -p "$OUT"
rm -rf "$OUT/librdkafka"
cp -r "$SRC" "$OUT/librdkafka"
cd "$OUT/librdkafka"
# Only what the benchmark needs: plaintext, the four codecs (lz4/snappy are built in; zstd/zlib
# if their dev packages are present), no SSL/SASL/curl.
./configure --disable-ssl --disable-gssapi --disable-curl --disable-sasl \
    > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log" >&2; exit 1; }
make -j"$(nproc)" -C src > "$OUT/make.log" 2>&1 || { tail -30 "$OUT/make.log" >&2; exit 1; }
make -C examples rdkafka_performance >> "$OUT/make.log" 2>&1 || { tail -30 "$OUT/make.log" >&2; exit 1; }
echo "$BIN"
