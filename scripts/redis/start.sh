#!/usr/bin/env bash
# Usage: scripts/redis/start.sh [PORT]   (default 6390)
# Start (or reuse) a private, non-persistent redis-server on 127.0.0.1:PORT.
# State lives in <repo>/target/redis/PORT/ (pid file, log, working dir).
# Prints redis://127.0.0.1:PORT as the last line on stdout; everything else
# goes to stderr, so callers can do URL=$(scripts/redis/start.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
port=${1:-6390}
if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
    echo "redbell: invalid port '$port'" >&2
    exit 2
fi

"$here/install.sh"

dir="$root/target/redis/$port"
pidfile="$dir/redis.pid"
logfile="$dir/redis.log"
url="redis://127.0.0.1:$port"
mkdir -p "$dir"

# Is PID a live (non-zombie) redis-server process?
is_our_redis() {
    local pid=$1 state
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/stat ]] || return 1
    state=$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f1) || return 1
    [[ $state != Z ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "redis-server"
}

pong() {
    [[ $(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null) == PONG ]]
}

# Reuse an instance we started earlier, if it is still alive and answering.
if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if is_our_redis "$pid" && pong; then
        echo "redbell: reusing redis-server pid $pid on port $port" >&2
        echo "$url"
        exit 0
    fi
    echo "redbell: removing stale pid file $pidfile" >&2
    rm -f "$pidfile"
fi

# Refuse to hijack a port someone else is serving.
if pong; then
    echo "redbell: port $port already answers PING but is not our instance (no pid file);" >&2
    echo "redbell: choose another port (e.g. REDBELL_TEST_PORT) or stop that server" >&2
    exit 1
fi

: >"$logfile"
redis-server \
    --port "$port" \
    --bind 127.0.0.1 \
    --daemonize yes \
    --pidfile "$pidfile" \
    --logfile "$logfile" \
    --dir "$dir" \
    --save '' \
    --appendonly no >&2

# Wait (up to ~10 s) for PONG from our process.
for _ in $(seq 1 100); do
    if [[ -f $pidfile ]] && pong; then
        pid=$(cat "$pidfile")
        if is_our_redis "$pid"; then
            echo "redbell: started redis-server pid $pid on port $port (log: $logfile)" >&2
            echo "$url"
            exit 0
        fi
    fi
    sleep 0.1
done

echo "redbell: redis-server on port $port did not answer PING within 10 s; log tail:" >&2
tail -n 20 "$logfile" >&2 || true
exit 1
