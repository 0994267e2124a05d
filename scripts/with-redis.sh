#!/usr/bin/env bash
# Usage: scripts/with-redis.sh CMD [ARGS...]
# Run CMD with REDIS_URL pointing at a Redis. If REDIS_URL is already set it is
# used as is; otherwise a private redis-server is started on port
# $REDBELL_TEST_PORT (default 6390) and always stopped afterwards, whatever CMD
# does. Also exports REDBELL_REDIS_SERVER (path to redis-server) for tests that
# spawn their own servers. Exits with CMD's status.
set -euo pipefail

if [[ $# -eq 0 ]]; then
    echo "usage: $0 CMD [ARGS...]" >&2
    exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
port=${REDBELL_TEST_PORT:-6390}

if [[ -n ${REDIS_URL:-} ]]; then
    echo "redbell: using REDIS_URL=$REDIS_URL" >&2
    # redis-server is only needed by tests that spawn their own servers.
    "$here/redis/install.sh" || echo "redbell: warning: redis-server unavailable; tests that spawn servers may skip/fail" >&2
else
    # If our instance on this port is already up (e.g. `make redis-up`), reuse
    # it and leave it running; otherwise stop what we start.
    pidfile="$here/../target/redis/$port/redis.pid"
    # shellcheck source=scripts/redis/common.sh
    . "$here/redis/common.sh"
    if redis_alive "$(cat "$pidfile" 2>/dev/null || true)"; then
        echo "redbell: our redis on port $port is already up; will leave it running" >&2
    else
        started=1
        trap '"$here/redis/stop.sh" "$port" || true' EXIT
    fi
    trap 'exit 129' HUP
    trap 'exit 130' INT
    trap 'exit 143' TERM
    REDIS_URL=$("$here/redis/start.sh" "$port" | tail -n 1)
    export REDIS_URL
fi

if [[ -z ${REDBELL_REDIS_SERVER:-} ]] && command -v redis-server >/dev/null 2>&1; then
    REDBELL_REDIS_SERVER=$(command -v redis-server)
    export REDBELL_REDIS_SERVER
fi

if [[ -n ${started:-} ]]; then
    # Run CMD as a child so the EXIT trap stops Redis afterwards.
    status=0
    "$@" || status=$?
    exit "$status"
else
    exec "$@"
fi
