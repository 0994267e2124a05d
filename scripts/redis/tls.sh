#!/usr/bin/env bash
# Usage: scripts/redis/tls.sh start PORT
#        scripts/redis/tls.sh stop  PORT
#
# Two local TLS-only Redis servers on loopback, for the TLS tests:
#   127.0.0.1:PORT    --tls-auth-clients optional  (a client certificate is
#                     checked when one is sent; none is needed)
#   127.0.0.1:PORT+1  --tls-auth-clients yes       (a client certificate
#                     signed by the CA is required)
# both with --port 0 (no plaintext port), --tls-port, --tls-cert-file,
# --tls-key-file and --tls-ca-cert-file, non-persistent.
#
# Certificates (PEM), made once with openssl into <repo>/target/redis/tls/
# and kept: ca.crt/ca.key (a CA of our own), server.crt/server.key (signed
# by it, for DNS:localhost and IP:127.0.0.1), client.crt/client.key (signed
# by it, for client authentication). State (pid files, logs, working dirs)
# lives in <repo>/target/redis/tls/PORT/.
#
# start: makes the certificates if missing, starts both servers (an instance
#   of ours already answering is reused) and waits until each answers PING
#   over TLS. Prints the two URLs on stdout, one per line
#   (rediss://127.0.0.1:PORT, then rediss://127.0.0.1:PORT+1); everything
#   else goes to stderr.
# stop: stops exactly the processes whose pids are in the state directory.
#
# The redis-server binary is $REDBELL_REDIS_SERVER if set, else redis-server
# on PATH (installed by scripts/redis/install.sh when missing, as is openssl).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=scripts/redis/common.sh
. "$here/common.sh"

usage() {
    echo "usage: $0 start|stop PORT" >&2
    exit 2
}
[[ $# -eq 2 ]] || usage
action=$1
port=$2
if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1024 || port + 1 > 65535)); then
    echo "redbell: invalid port '$port' (1024..65534)" >&2
    exit 2
fi

certs="$root/target/redis/tls"
dir="$certs/$port"
names=(optional required)

port_of() {
    case $1 in
    optional) echo "$port" ;;
    required) echo $((port + 1)) ;;
    esac
}

# PING over TLS with the client certificate (accepted by both servers).
tls_pong() {
    [[ $(redis-cli --tls --cacert "$certs/ca.crt" --cert "$certs/client.crt" \
        --key "$certs/client.key" -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]
}

stop_all() {
    stop_named "${names[@]}"
}

ensure_openssl() {
    command -v openssl >/dev/null 2>&1 && return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "redbell: openssl not found and apt-get is unavailable; please install openssl" >&2
        return 1
    fi
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "redbell: openssl not found, and not root and no sudo; please install openssl" >&2
            return 1
        }
        sudo=(sudo)
    fi
    echo "redbell: installing openssl with apt-get ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq >&2
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends openssl >&2
}

# A key and a certificate signed by our CA: make_cert NAME CN EXTENSIONS.
make_cert() {
    local name=$1 cn=$2 ext=$3
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -keyout "$certs/$name.key" -out "$certs/$name.csr" -subj "/CN=$cn" 2>/dev/null
    printf '%b' "$ext" >"$certs/$name.ext"
    openssl x509 -req -in "$certs/$name.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
        -CAcreateserial -days 3650 -sha256 -extfile "$certs/$name.ext" \
        -out "$certs/$name.crt" 2>/dev/null
    rm -f "$certs/$name.csr" "$certs/$name.ext"
}

make_certs() {
    local f
    for f in ca.crt ca.key server.crt server.key client.crt client.key; do
        [[ -s $certs/$f ]] || break
    done
    [[ -s $certs/$f ]] && return 0
    ensure_openssl
    echo "redbell: making a test CA, a server and a client certificate in $certs" >&2
    mkdir -p "$certs"
    openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
        -keyout "$certs/ca.key" -out "$certs/ca.crt" -days 3650 -sha256 \
        -subj "/CN=redbell test CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    make_cert server localhost \
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n"
    make_cert client "redbell test client" \
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
    chmod 600 "$certs"/*.key
}

# start_one NAME AUTH_CLIENTS
start_one() {
    local name=$1 auth=$2 p
    p=$(port_of "$name")
    if redis_alive "$(pid_of "$name")" && tls_pong "$p"; then
        echo "redbell: reusing TLS redis ($name) pid $(pid_of "$name") on port $p" >&2
        return 0
    fi
    rm -f "$dir/$name.pid"
    if redis_pong "$p" || tls_pong "$p"; then
        echo "redbell: port $p already answers PING but is not ours; choose another port" >&2
        return 1
    fi
    redis_launch "$name" "$p" "$dir" tls_pong \
        --port 0 \
        --tls-port "$p" \
        --tls-cert-file "$certs/server.crt" \
        --tls-key-file "$certs/server.key" \
        --tls-ca-cert-file "$certs/ca.crt" \
        --tls-auth-clients "$auth"
}

case $action in
stop)
    if [[ ! -d $dir ]]; then
        echo "redbell: no TLS redis on port $port" >&2
        exit 0
    fi
    stop_all
    exit 0
    ;;
start) ;;
*) usage ;;
esac

"$here/install.sh"
mkdir -p "$certs"
# Tests start several pairs at once: one of them makes the certificates.
exec 9>"$certs/.lock"
flock 9
make_certs
flock -u 9
mkdir -p "$dir"
trap 'status=$?; if ((status != 0)); then stop_all || true; fi' EXIT
start_one optional optional
start_one required yes
echo "rediss://127.0.0.1:$port"
echo "rediss://127.0.0.1:$((port + 1))"
