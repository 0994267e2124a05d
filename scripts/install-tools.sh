#!/usr/bin/env bash
# Install the OS tools `make test` uses beyond Redis, if missing: man and
# groff, which the CLI's man-page test renders its pages with, and python3
# with venv, which `make test-python` builds target/py-venv with.
# Idempotent: silent and exit 0 when they are already there.
set -euo pipefail
if command -v man >/dev/null 2>&1 && command -v groff >/dev/null 2>&1 &&
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    exit 0
fi
sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
echo "redbell: installing man-db, groff-base and python3-venv with apt-get ..." >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq --no-install-recommends man-db groff-base python3 python3-venv >&2
