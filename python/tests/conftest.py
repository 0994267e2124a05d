"""Shared helpers of the Python suite. Every test talks to the real Redis at
``REDIS_URL`` (``scripts/with-redis.sh`` sets it); the interoperation tests
also run the Rust side from ``target/debug`` (``REDBELL_BIN_DIR``)."""

import asyncio
import os
import subprocess
import sys
import time
import uuid

import pytest
import redis.asyncio as aioredis

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN_DIR = os.environ.get("REDBELL_BIN_DIR", os.path.join(REPO, "target", "debug"))


def redis_url() -> str:
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.fail("REDIS_URL is not set: run through scripts/with-redis.sh")
    return url


def unique(tag: str) -> str:
    """A lock name no other test (or run) uses."""
    return f"py-{tag}-{uuid.uuid4().hex[:12]}"


def rust_bin(name: str) -> str:
    """Path of a Rust binary (the CLI or a helper of integration-tests)."""
    path = os.path.join(BIN_DIR, name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} missing: cargo build --workspace --bins first")
    return path


def python_worker(*args: str, **kw) -> subprocess.Popen:
    """A separate Python process running tests/worker.py."""
    return subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "worker.py"),
                             *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": redis_url()}, **kw)


async def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The next stdout line of ``proc`` (raises on timeout or EOF)."""
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)
    if not line:
        raise AssertionError(f"process {proc.args} ended (code {proc.poll()}) before a line")
    return line.strip()


async def server_us(r) -> int:
    sec, usec = await r.time()
    return sec * 1_000_000 + usec


async def eventually(pred, timeout: float, step: float = 0.01) -> bool:
    end = time.monotonic() + timeout
    while True:
        if await pred():
            return True
        if time.monotonic() >= end:
            return False
        await asyncio.sleep(step)


@pytest.fixture
async def raw():
    r = aioredis.Redis.from_url(redis_url(), protocol=2)
    yield r
    await r.aclose()


@pytest.fixture
async def client():
    import redbell
    c = await redbell.connect(redis_url())
    yield c
    await c.aclose()


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
