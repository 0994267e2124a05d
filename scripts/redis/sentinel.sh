#!/usr/bin/env bash
# Usage: scripts/redis/sentinel.sh start BASE_PORT [--requirepass PASSWORD] [--sentinel-pass PASSWORD]
#        scripts/redis/sentinel.sh stop  BASE_PORT
#
# A local Sentinel topology on loopback, for trying failovers by hand:
#   primary    127.0.0.1:BASE        (non-persistent)
#   replica    127.0.0.1:BASE+1      replicaof the primary
#   sentinels  127.0.0.1:BASE+10..BASE+12, each with
#              sentinel monitor mymaster 127.0.0.1 BASE 2
#              sentinel down-after-milliseconds mymaster 1000
#              sentinel failover-timeout mymaster 10000
# State (configs, pid files, logs, working dirs) lives in
# <repo>/target/redis-sentinel/BASE/.
#
# --requirepass PASSWORD: the primary and the replica require PASSWORD
#   (`requirepass`, and `masterauth` so that either can replicate from the
#   other), and the sentinels authenticate to them with it
#   (`sentinel auth-pass mymaster PASSWORD`).
# --sentinel-pass PASSWORD: the sentinels require a password of their own
#   (`requirepass` in their config, and `sentinel sentinel-pass` to talk to
#   each other); the printed URLs carry it (redis://:PASSWORD@127.0.0.1:PORT).
#
# start: starts the five processes (redis-server, and `redis-server CONF
#   --sentinel` for the sentinels: no separate redis-sentinel package needed),
#   then waits until the replica's link is up and all three sentinels report
#   the same master (127.0.0.1:BASE), see each other (num-other-sentinels 2)
#   and the replica (num-slaves 1), with no s_down/o_down flag. Prints the
#   three sentinel URLs on stdout, one per line; everything else goes to
#   stderr, so callers can do URLS=$(scripts/redis/sentinel.sh start 7000).
#   A healthy topology of BASE that is already running with the same
#   passwords is reused; one that failed over, lost a process or was
#   started with other passwords is restarted.
# stop: stops exactly the processes whose pids are in the state directory
#   (sentinels first, so they do not fail over while the servers go): SIGTERM,
#   up to 5 s, then SIGKILL. A no-op when nothing is running.
#
# The redis-server binary is $REDBELL_REDIS_SERVER if set, else redis-server
# on PATH (installed by scripts/redis/install.sh when missing).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/redis/common.sh
. "$here/common.sh"

usage() {
    echo "usage: $0 start|stop BASE_PORT [--requirepass PASSWORD] [--sentinel-pass PASSWORD]" >&2
    exit 2
}
[[ $# -ge 2 ]] || usage
action=$1
base=$2
shift 2
server_pass=
sentinel_pass=
while [[ $# -gt 0 ]]; do
    case $1 in
    --requirepass)
        [[ $# -ge 2 && -n $2 ]] || usage
        server_pass=$2
        shift 2
        ;;
    --sentinel-pass)
        [[ $# -ge 2 && -n $2 ]] || usage
        sentinel_pass=$2
        shift 2
        ;;
    *) usage ;;
    esac
done
if ! [[ $base =~ ^[0-9]+$ ]] || ((base < 1024 || base + 12 > 65535)); then
    echo "redbell: invalid base port '$base' (1024..65523)" >&2
    exit 2
fi

primary_port=$base
replica_port=$((base + 1))
sentinel_ports=($((base + 10)) $((base + 11)) $((base + 12)))
dir="$root/target/redis-sentinel/$base"
names=(sentinel-0 sentinel-1 sentinel-2 replica primary) # stop order

port_of() {
    case $1 in
    primary) echo "$primary_port" ;;
    replica) echo "$replica_port" ;;
    sentinel-*) echo "${sentinel_ports[${1#sentinel-}]}" ;;
    esac
}


# CMD... with redis-cli authenticating with the servers' password, if any
# (redis-cli reads REDISCLI_AUTH).
with_server_auth() {
    if [[ -n $server_pass ]]; then REDISCLI_AUTH=$server_pass "$@"; else "$@"; fi
}
server_cli() {
    with_server_auth redis_cli "$@"
}
sentinel_cli() {
    if [[ -n $sentinel_pass ]]; then REDISCLI_AUTH=$sentinel_pass redis_cli "$@"; else redis_cli "$@"; fi
}

# What a running topology was started with, to reuse it only for the same.
mode() {
    printf 'requirepass=%s sentinel-pass=%s\n' "$server_pass" "$sentinel_pass"
}



stop_all() {
    stop_named "${names[@]}"
}

print_urls() {
    local port
    for port in "${sentinel_ports[@]}"; do
        echo "redis://${sentinel_pass:+:$sentinel_pass@}127.0.0.1:$port"
    done
}

# One field of `SENTINEL MASTER mymaster` (a flat name/value list) on a sentinel.
master_field() {
    sentinel_cli "$1" sentinel master mymaster | awk -v f="$2" 'NR % 2 == 1 && $0 == f { getline; print; exit }'
}

# Replica link up, and all three sentinels agree on a healthy master.
healthy() {
    local port addr first=
    [[ $(server_cli "$replica_port" info replication | tr -d '\r' | grep '^master_link_status:') == master_link_status:up ]] || return 1
    for port in "${sentinel_ports[@]}"; do
        addr=$(sentinel_cli "$port" sentinel get-master-addr-by-name mymaster | tr '\n' ':')
        [[ -n $addr ]] || return 1
        [[ -z $first || $addr == "$first" ]] || return 1
        first=$addr
        [[ $(master_field "$port" flags) == master ]] || return 1
        [[ $(master_field "$port" num-other-sentinels) == 2 ]] || return 1
        [[ $(master_field "$port" num-slaves) == 1 ]] || return 1
    done
    [[ $first == "127.0.0.1:$primary_port:" ]]
}

wait_healthy() {
    local what=$1 tries=$2
    for _ in $(seq 1 "$tries"); do
        healthy && return 0
        sleep 0.2
    done
    echo "redbell: the sentinel topology on base $base is not $what; log tails:" >&2
    for name in primary replica sentinel-0 sentinel-1 sentinel-2; do
        echo "--- $name" >&2
        tail -n 8 "$dir/$name.log" >&2 || true
    done
    return 1
}

case $action in
stop)
    if [[ ! -d $dir ]]; then
        echo "redbell: no sentinel topology on base $base" >&2
        exit 0
    fi
    stop_all
    exit 0
    ;;
start) ;;
*) usage ;;
esac

"$here/install.sh"
server=${REDBELL_REDIS_SERVER:-redis-server}
mkdir -p "$dir"

# Reuse a running topology of ours.
running=0
for name in "${names[@]}"; do
    redis_alive "$(pid_of "$name")" && running=$((running + 1))
done
if ((running == ${#names[@]})) && [[ $(cat "$dir/mode" 2>/dev/null) == "$(mode)" ]]; then
    for _ in $(seq 1 10); do
        if healthy; then
            echo "redbell: reusing the sentinel topology on base $base" >&2
            print_urls
            exit 0
        fi
        sleep 0.2
    done
fi
if ((running > 0)); then
    # Part of it is gone, it failed over (the replica is the master now), or
    # it has other passwords.
    echo "redbell: the sentinel topology on base $base is not as asked for; restarting it" >&2
    stop_all
fi

# Refuse to hijack ports someone else is serving.
for port in "$primary_port" "$replica_port" "${sentinel_ports[@]}"; do
    if redis_pong "$port"; then
        echo "redbell: port $port already answers PING but is not ours; choose another base port" >&2
        exit 1
    fi
done

# Started as daemons with pid files; on any failure below, stop what we started.
trap 'status=$?; if ((status != 0)); then stop_all || true; fi' EXIT


mode >"$dir/mode"
auth=()
if [[ -n $server_pass ]]; then
    auth=(--requirepass "$server_pass" --masterauth "$server_pass")
fi
with_server_auth redis_start primary "$primary_port" "$dir" "${auth[@]}"
with_server_auth redis_start replica "$replica_port" "$dir" "${auth[@]}" \
    --replicaof 127.0.0.1 "$primary_port"

# The sentinels learn the replica from the primary's INFO when they connect
# (and then only every 10 s): start them once the replica is attached.
for _ in $(seq 1 100); do
    [[ $(server_cli "$replica_port" info replication | tr -d '\r' | grep '^master_link_status:') == master_link_status:up ]] && break
    sleep 0.1
done

for i in 0 1 2; do
    name=sentinel-$i
    port=${sentinel_ports[$i]}
    conf="$dir/$name.conf"
    # A fresh config each start: Sentinel rewrites it with what it learned.
    cat >"$conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
pidfile "$dir/$name.pid"
logfile "$dir/$name.log"
dir "$dir"
sentinel monitor mymaster 127.0.0.1 $primary_port 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 10000
sentinel parallel-syncs mymaster 1
EOF
    if [[ -n $server_pass ]]; then
        echo "sentinel auth-pass mymaster \"$server_pass\"" >>"$conf"
    fi
    if [[ -n $sentinel_pass ]]; then
        printf 'requirepass "%s"\nsentinel sentinel-pass "%s"\n' "$sentinel_pass" "$sentinel_pass" >>"$conf"
    fi
    : >"$dir/$name.log"
    "$server" "$conf" --sentinel >&2
done
for i in 0 1 2; do
    name=sentinel-$i
    for _ in $(seq 1 100); do
        redis_alive "$(pid_of "$name")" && [[ $(sentinel_cli "${sentinel_ports[$i]}" ping) == PONG ]] && break
        sleep 0.1
    done
    echo "redbell: started $name pid $(pid_of "$name") on port ${sentinel_ports[$i]}" >&2
done

wait_healthy "healthy within 30 s" 150
echo "redbell: sentinel topology up: primary 127.0.0.1:$primary_port, replica 127.0.0.1:$replica_port, master name mymaster (logs: $dir)" >&2
print_urls
