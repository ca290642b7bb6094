# Shared by the bench scripts (sourced, not run): every process a script starts goes in PIDS
# and is killed on exit, also on failure or Ctrl-C; `log` prefixes BENCH_NAME; `wait_port`
# waits for a broker to listen, `port_busy` tells whether a port is taken.
# A script may set CLEANUP_EXTRA to a function run at the end of the cleanup.

PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    sleep 0.5
    for p in "${PIDS[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
    done
    if [[ -n "${CLEANUP_EXTRA:-}" ]]; then "$CLEANUP_EXTRA"; fi
    return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "[${BENCH_NAME:-bench} $(date +%H:%M:%S)] $*" >&2; }

wait_port() {
    local port="$1" pid="$2"
    for _ in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
        kill -0 "$pid" 2>/dev/null || { log "broker $pid exited"; return 1; }
        sleep 0.1
    done
    return 1
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
