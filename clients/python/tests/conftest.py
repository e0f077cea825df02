"""Real servers for the client's tests: a throwaway ``redis-server`` and an
``rmq serve`` (the workspace's debug build, or ``$RMQ_BIN``) on free
loopback ports, with temp dirs, stopped by PID. Nothing here touches a
server the tests did not start."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Iterator, Optional, Tuple

import httpx
import pytest

from rmq_client import Client, Topic

REPO = Path(__file__).resolve().parents[3]
TOKEN = "python-client-test-token"


def rmq_bin() -> str:
    path = os.environ.get("RMQ_BIN") or str(REPO / "target" / "debug" / "rmq")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no rmq binary at {path}: build it (cargo build -p rmq-cli) or set RMQ_BIN")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout}s")


class Redis:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="rmq-py-redis-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        def ping() -> bool:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")

        wait_for(ping, "redis-server")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Server:
    """``rmq serve`` on a free port; :meth:`restart` keeps its port."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.dir = tempfile.mkdtemp(prefix="rmq-py-serve-")
        self.token_file = Path(self.dir) / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.port = free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.log = open(Path(self.dir) / "serve.log", "ab")
        self.proc = subprocess.Popen(
            [rmq_bin(), "serve", "--redis", self.redis.url, "--listen", f"127.0.0.1:{self.port}",
             "--token-file", str(self.token_file), "--shutdown-grace", "500"],
            stdout=self.log,
            stderr=self.log,
        )
        wait_for(lambda: httpx.get(f"{self.url}/api/v1/server", timeout=1).status_code == 200, "rmq serve")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.proc = None
            self.log.close()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis() -> Iterator[Redis]:
    r = Redis()
    yield r
    r.stop()


@pytest.fixture
def server(redis: Redis) -> Iterator[Server]:
    s = Server(redis)
    yield s
    s.stop()


@pytest.fixture
def topic_name() -> str:
    """A topic name of its own for each test (the Redis is shared)."""
    return "t" + uuid.uuid4().hex[:12]


@asynccontextmanager
async def fresh_topic(server: "Server", kind: str, client_timeout: float = 10.0, **settings) -> AsyncIterator[Tuple[Client, Topic]]:
    """A client of ``server`` and a fresh topic of ``kind`` with ``settings``."""
    async with Client(server.url, TOKEN, timeout=client_timeout) as rmq:
        name = "t" + uuid.uuid4().hex[:12]
        await rmq.create_topic(name, kind, **settings)
        yield rmq, rmq.topic(name)


def run(coro):
    """Runs a test's coroutine on a fresh event loop."""
    return asyncio.run(coro)
