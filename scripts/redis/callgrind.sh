#!/usr/bin/env bash
# Usage: REDBELL_REDIS_SERVER=scripts/redis/callgrind.sh (with
#        REDBELL_CALLGRIND_DIR set), then start servers as usual.
#
# A redis-server under Valgrind's Callgrind, for the counted part of
# `redbell-bench scale`: it counts the instructions the server executes and
# simulates its caches, so a run's cost per operation does not depend on
# what else the machine runs. Takes redis-server's arguments. The real
# binary is $REDBELL_REDIS_REAL, else redis-server on PATH; counts are
# dumped to $REDBELL_CALLGRIND_DIR/redis.PID.N (`callgrind_control --dump
# PID`, which also zeroes them).
#
# `--daemonize yes` is honoured by starting the server in the background
# here, undaemonized: a daemonized server forks, and Callgrind's control
# channel does not follow the fork. The server still writes its --pidfile.
set -euo pipefail

dir=${REDBELL_CALLGRIND_DIR:?REDBELL_CALLGRIND_DIR is not set}
args=()
background=0
while (($#)); do
    if [[ $1 == --daemonize ]]; then
        [[ ${2:-no} == yes ]] && background=1
        shift 2 || shift
    else
        args+=("$1")
        shift
    fi
done
# The simulated last-level cache is 8 MiB, 16-way (smaller than most
# servers' shared caches, so a growing keyspace shows early; Valgrind would
# otherwise take the host's, which a VM may report oddly).
cmd=(valgrind --tool=callgrind --cache-sim=yes --LL=8388608,16,64
    --dump-instr=no --dump-line=no
    --callgrind-out-file="$dir/redis.%p"
    "${REDBELL_REDIS_REAL:-redis-server}" "${args[@]}" --daemonize no)
if ((background)); then
    setsid "${cmd[@]}" </dev/null >>"$dir/valgrind.log" 2>&1 &
else
    exec "${cmd[@]}" 2>>"$dir/valgrind.log"
fi
