#!/usr/bin/env bash
# Usage: scripts/redis/stop.sh [PORT]   (default 6390)
# Stop exactly the redis-server whose pid is in <repo>/target/redis/PORT/redis.pid.
# SIGTERM, wait up to 5 s, then SIGKILL. No-op (exit 0) if it is not running.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
port=${1:-6390}
pidfile="$root/target/redis/$port/redis.pid"
# shellcheck source=scripts/redis/common.sh
. "$here/common.sh"

if [[ ! -f $pidfile ]]; then
    echo "redbell: no redis running on port $port (no pid file)" >&2
    exit 0
fi
redis_stop "$pidfile"
