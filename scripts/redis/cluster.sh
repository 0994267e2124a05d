#!/usr/bin/env bash
# Usage: scripts/redis/cluster.sh start BASE_PORT
#        scripts/redis/cluster.sh stop  BASE_PORT
#
# A local Redis Cluster on loopback: six non-persistent nodes on ports
# BASE..BASE+5 (cluster bus on BASE+10000..BASE+10005), each started with
#   --cluster-enabled yes --cluster-node-timeout 2000
#   --cluster-config-file nodes.conf --save '' --appendonly no
# and joined by `redis-cli --cluster create ... --cluster-replicas 1
# --cluster-yes` into three primaries, each with one replica (redis-cli
# picks which replica follows which primary). State (one working directory
# per node holding its nodes.conf, pid files, logs) lives in
# <repo>/target/redis-cluster/BASE/.
#
# start: starts the six nodes, creates the cluster, then waits until every
#   node reports cluster_state:ok, all six agree on the same view (the same
#   nodes, roles and slot ranges, no fail/pfail/handshake flags), the 16384
#   slots are covered by three primaries, and every replica's
#   master_link_status is up. Prints the six node URLs on stdout, one per
#   line (redis://127.0.0.1:BASE ...); everything else goes to stderr, so
#   callers can do URLS=$(scripts/redis/cluster.sh start 7000).
#   A healthy cluster of BASE that is already running (all six of our
#   processes alive) is reused, whatever failovers it went through; one that
#   lost a process or is unhealthy is stopped and created afresh.
# stop: stops exactly the processes whose pids are in the state directory:
#   SIGTERM to all of them, up to 5 s, then SIGKILL. A no-op when nothing is
#   running.
#
# The redis-server binary is $REDBELL_REDIS_SERVER if set, else redis-server
# on PATH; redis-cli must be on PATH (both installed by
# scripts/redis/install.sh when missing).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/redis/common.sh
. "$here/common.sh"

usage() {
    echo "usage: $0 start|stop BASE_PORT" >&2
    exit 2
}
[[ $# -eq 2 ]] || usage
action=$1
base=$2
# The cluster bus port is the node's port + 10000.
if ! [[ $base =~ ^[0-9]+$ ]] || ((base < 1024 || base + 5 + 10000 > 65535)); then
    echo "redbell: invalid base port '$base' (1024..55530)" >&2
    exit 2
fi

ports=()
for i in 0 1 2 3 4 5; do
    ports+=($((base + i)))
done
dir="$root/target/redis-cluster/$base"




stop_all() {
    stop_named "${ports[@]}"
}

print_urls() {
    local port
    for port in "${ports[@]}"; do
        echo "redis://127.0.0.1:$port"
    done
}

# One field of `CLUSTER INFO` or `INFO replication` on a node.
info_field() {
    redis_cli "$1" "${@:3}" | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2; exit }'
}

# A node's view of the cluster, without what differs from node to node or
# from moment to moment (myself flag, ping/pong times, link state): one line
# per node, "id host:port role master-id epoch slots...", sorted.
view() {
    redis_cli "$1" cluster nodes | tr -d '\r' | awk '
        NF >= 8 {
            flags = $3; sub(/(^|,)myself/, "", flags); sub(/^,/, "", flags)
            addr = $2; sub(/@.*/, "", addr)
            line = $1 " " addr " " flags " " $4 " " $7
            for (i = 9; i <= NF; i++) line = line " " $i
            print line
        }' | sort
}

# Every node reports cluster_state:ok, all six share one view of six nodes
# (three primaries covering every slot, three replicas), with no node
# flagged fail, pfail, handshake or noaddr, and every replica's link is up.
healthy() {
    local port v first=''
    for port in "${ports[@]}"; do
        [[ $(info_field "$port" cluster_state cluster info) == ok ]] || return 1
        v=$(view "$port")
        [[ -n $v ]] || return 1
        [[ -z $first || $v == "$first" ]] || return 1
        first=$v
    done
    [[ $(wc -l <<<"$first") -eq 6 ]] || return 1
    ! grep -Eq 'fail|handshake|noaddr' <<<"$first" || return 1
    [[ $(awk '$3 == "master" && NF > 5' <<<"$first" | wc -l) -eq 3 ]] || return 1
    [[ $(awk '$3 == "slave"' <<<"$first" | wc -l) -eq 3 ]] || return 1
    [[ $(info_field "${ports[0]}" cluster_slots_ok cluster info) == 16384 ]] || return 1
    for port in "${ports[@]}"; do
        if [[ $(info_field "$port" role info replication) == slave ]]; then
            [[ $(info_field "$port" master_link_status info replication) == up ]] || return 1
        fi
    done
}

wait_healthy() {
    local what=$1 tries=$2
    for _ in $(seq 1 "$tries"); do
        healthy && return 0
        sleep 0.1
    done
    echo "redbell: the cluster on base $base is not $what; cluster nodes and log tails:" >&2
    redis_cli "${ports[0]}" cluster nodes >&2 || true
    for port in "${ports[@]}"; do
        echo "--- node $port" >&2
        tail -n 8 "$dir/$port.log" >&2 || true
    done
    return 1
}

case $action in
stop)
    if [[ ! -d $dir ]]; then
        echo "redbell: no cluster on base $base" >&2
        exit 0
    fi
    stop_all
    exit 0
    ;;
start) ;;
*) usage ;;
esac

"$here/install.sh"
mkdir -p "$dir"

# Reuse a running cluster of ours.
running=0
for port in "${ports[@]}"; do
    redis_alive "$(pid_of "$port")" && running=$((running + 1))
done
if ((running == ${#ports[@]})); then
    for _ in $(seq 1 20); do
        if healthy; then
            echo "redbell: reusing the cluster on base $base" >&2
            print_urls
            exit 0
        fi
        sleep 0.1
    done
fi
if ((running > 0)); then
    echo "redbell: the cluster on base $base lost a node or is unhealthy; creating it afresh" >&2
    stop_all
fi

# Refuse to hijack ports someone else is serving (the bus ports are checked
# by redis-server itself, which exits when it cannot bind them).
for port in "${ports[@]}"; do
    if redis_pong "$port"; then
        echo "redbell: port $port already answers PING but is not ours; choose another base port" >&2
        exit 1
    fi
done

# Started as daemons with pid files; on any failure below, stop what we started.
trap 'status=$?; if ((status != 0)); then stop_all || true; fi' EXIT

for port in "${ports[@]}"; do
    # A fresh node: no nodes.conf from an earlier cluster.
    rm -rf "${dir:?}/$port"
    redis_start "$port" "$port" "$dir" \
        --cluster-enabled yes \
        --cluster-node-timeout 2000 \
        --cluster-config-file nodes.conf
done

addrs=()
for port in "${ports[@]}"; do
    addrs+=("127.0.0.1:$port")
done
if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1; then
    echo "redbell: redis-cli --cluster create failed:" >&2
    cat "$dir/create.log" >&2
    exit 1
fi

wait_healthy "healthy within 30 s" 300
echo "redbell: cluster up on 127.0.0.1:${ports[0]}..${ports[5]} (logs: $dir):" >&2
redis_cli "${ports[0]}" cluster nodes | awk '{ sub(/@.*/, "", $2); print "redbell:   " $2 " " $3 " " $9 }' >&2
print_urls
