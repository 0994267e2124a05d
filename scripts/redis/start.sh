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
url="redis://127.0.0.1:$port"
mkdir -p "$dir"
# shellcheck source=scripts/redis/common.sh
. "$here/common.sh"

# Reuse an instance we started earlier, if it is still alive and answering.
if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if redis_alive "$pid" && redis_pong "$port"; then
        echo "redbell: reusing redis-server pid $pid on port $port" >&2
        echo "$url"
        exit 0
    fi
    echo "redbell: removing stale pid file $pidfile" >&2
    rm -f "$pidfile"
fi

# Refuse to hijack a port someone else is serving.
if redis_pong "$port"; then
    echo "redbell: port $port already answers PING but is not our instance (no pid file);" >&2
    echo "redbell: choose another port (e.g. REDBELL_TEST_PORT) or stop that server" >&2
    exit 1
fi

redis_start redis "$port" "$dir"
echo "$url"
