# shellcheck shell=bash
# Shared by the scripts in scripts/redis/ (sourced, not run): checking,
# starting and stopping the redis-server processes they own. Every process
# is a daemon with a pid file; nothing is ever killed by name.

# Is PID a live (non-zombie) redis (or valkey) process? (An orphaned daemon
# may linger as a zombie when PID 1 does not reap; that counts as gone.)
redis_alive() {
    local pid=$1 state
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/stat ]] || return 1
    state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [[ -n $state && $state != Z ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -Eq "redis|valkey"
}

# redis-cli against 127.0.0.1:PORT, errors silenced.
redis_cli() {
    local port=$1
    shift
    redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

redis_pong() {
    [[ $(redis_cli "$1" ping) == PONG ]]
}

# redis_start NAME PORT DIR [ARGS...]: starts a non-persistent redis-server
# ($REDBELL_REDIS_SERVER, else redis-server) on 127.0.0.1:PORT with pid file
# DIR/NAME.pid, log DIR/NAME.log and working directory DIR/NAME, and waits up
# to 10 s until that process answers PING (else prints the log tail and
# fails). ARGS are passed on (e.g. --replicaof, --cluster-enabled yes).
redis_start() {
    local name=$1 port=$2 dir=$3
    shift 3
    redis_launch "$name" "$port" "$dir" redis_pong \
        --port "$port" --repl-diskless-sync-delay 0 "$@"
}

# redis_launch NAME PORT DIR PONG [ARGS...]: what redis_start does, with
# PONG the function that checks PORT answers PING (redis_pong, or one that
# speaks TLS) and ARGS the listening options and the rest (later options
# override earlier ones, so ARGS may turn persistence back on).
redis_launch() {
    local name=$1 port=$2 dir=$3 pong=$4
    shift 4
    mkdir -p "$dir/$name"
    : >"$dir/$name.log"
    "${REDBELL_REDIS_SERVER:-redis-server}" \
        --bind 127.0.0.1 \
        --daemonize yes \
        --pidfile "$dir/$name.pid" \
        --logfile "$dir/$name.log" \
        --dir "$dir/$name" \
        --save '' \
        --appendonly no \
        "$@" >&2
    local pid
    for _ in $(seq 1 100); do
        pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
        if redis_alive "$pid" && "$pong" "$port"; then
            echo "redbell: started $name pid $pid on port $port" >&2
            return 0
        fi
        sleep 0.1
    done
    echo "redbell: $name on port $port did not answer PING within 10 s; log tail:" >&2
    tail -n 20 "$dir/$name.log" >&2 || true
    return 1
}

# pid_of NAME: the pid in $dir/NAME.pid (the caller's $dir), or nothing.
pid_of() {
    cat "$dir/$1.pid" 2>/dev/null || true
}

# stop_named NAME...: redis_stop of $dir/NAME.pid for each NAME.
stop_named() {
    local name pidfiles=()
    for name in "$@"; do
        pidfiles+=("$dir/$name.pid")
    done
    redis_stop "${pidfiles[@]}"
}

# redis_stop PIDFILE...: stops the processes named by these pid files:
# SIGTERM to all, up to 5 s, then SIGKILL; removes the pid files of those
# gone. Fails if one survives.
redis_stop() {
    # (A redis-server removes its own pid file when it exits cleanly: the
    # pids are read once, up front.)
    local pidfile pid entry status=0 live=()
    for pidfile in "$@"; do
        pid=$(cat "$pidfile" 2>/dev/null || true)
        if redis_alive "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
            live+=("$pid:$pidfile")
        else
            rm -f "$pidfile"
        fi
    done
    for entry in "${live[@]}"; do
        pid=${entry%%:*}
        pidfile=${entry#*:}
        for _ in $(seq 1 50); do
            redis_alive "$pid" || break
            sleep 0.1
        done
        if redis_alive "$pid"; then
            echo "redbell: pid $pid ($pidfile) ignored SIGTERM for 5 s; sending SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null || true
            for _ in $(seq 1 20); do
                redis_alive "$pid" || break
                sleep 0.1
            done
        fi
        if redis_alive "$pid"; then
            echo "redbell: failed to stop pid $pid ($pidfile)" >&2
            status=1
        else
            echo "redbell: stopped redis pid $pid ($pidfile)" >&2
            rm -f "$pidfile"
        fi
    done
    return "$status"
}
