#!/usr/bin/env bash
# Usage: scripts/redis/stop.sh [PORT]   (default 6390)
# Stop exactly the redis-server whose pid is in <repo>/target/redis/PORT/redis.pid.
# SIGTERM, wait up to 5 s, then SIGKILL. No-op (exit 0) if it is not running.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
port=${1:-6390}
pidfile="$root/target/redis/$port/redis.pid"

# Alive = exists and not a zombie (an orphaned daemon may linger as a zombie
# when PID 1 does not reap; that counts as gone).
alive() {
    local state
    [[ -r /proc/$1/stat ]] || return 1
    state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [[ -n $state && $state != Z ]]
}

if [[ ! -f $pidfile ]]; then
    echo "redbell: no redis running on port $port (no pid file)" >&2
    exit 0
fi
pid=$(cat "$pidfile" 2>/dev/null || true)
if ! [[ $pid =~ ^[0-9]+$ ]] || ! alive "$pid"; then
    echo "redbell: redis on port $port not running (stale pid file removed)" >&2
    rm -f "$pidfile"
    exit 0
fi
if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "redis-server"; then
    echo "redbell: pid $pid from $pidfile is not a redis-server; not killing it (pid file removed)" >&2
    rm -f "$pidfile"
    exit 0
fi

kill -TERM "$pid" 2>/dev/null || true
for _ in $(seq 1 50); do
    alive "$pid" || break
    sleep 0.1
done
if alive "$pid"; then
    echo "redbell: redis pid $pid ignored SIGTERM for 5 s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do
        alive "$pid" || break
        sleep 0.1
    done
fi
rm -f "$pidfile"
if alive "$pid"; then
    echo "redbell: failed to stop redis pid $pid" >&2
    exit 1
fi
echo "redbell: stopped redis-server pid $pid on port $port" >&2
