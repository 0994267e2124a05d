#!/usr/bin/env bash
# Install redis-server and redis-cli from Debian packages if they are missing.
# Idempotent: silent and exit 0 when both are already on PATH.
# Note: the Debian package may start a system redis on port 6379; our scripts
# never use or touch it (they run private instances on their own ports).
set -euo pipefail

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    exit 0
fi

pkgs=(redis-server redis-tools)

if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "redbell: redis-server/redis-cli not found, and not root and no sudo available." >&2
    echo "redbell: please install them by hand, e.g.: apt-get install -y ${pkgs[*]}" >&2
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "redbell: redis-server/redis-cli not found and apt-get is unavailable." >&2
    echo "redbell: please install Redis (server and cli, >= 7) by hand and put it on PATH." >&2
    exit 1
fi

echo "redbell: installing ${pkgs[*]} with apt-get ..." >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "redbell: installation finished but redis-server/redis-cli still not on PATH" >&2
    exit 1
fi
echo "redbell: installed $(redis-server --version)" >&2
