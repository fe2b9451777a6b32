"""Shared fixtures: the same tests run on every backend available.

Memory and ``file:`` always; Swift with ``BANKLEASE_TEST_SWIFT=1`` (and ``ST_*``), S3 with
``BANKLEASE_TEST_S3=1`` (and ``AWS_*``, ``S3_BUCKET``) — ``.ci/run`` starts both servers on
127.0.0.1 and sets these. Every test gets a fresh bank under a unique prefix.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import hmac
import os
import pathlib
import re
import select
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional

import pytest

import banklease

REPO = pathlib.Path(__file__).resolve().parents[2]


@dataclass
class Backend:
    """A bank on one backend, with what the tests need to know about it."""

    name: str
    url: str
    bank: banklease.Bank
    # Set for file: banks: the bank's directory.
    path: Optional[pathlib.Path]
    # Observers' skew margin: must cover the store's timestamp resolution (1 s on S3).
    margin: float
    # Lease windows short enough for a test, long enough for the store's round trips.
    windows: banklease.LeaseWindows
    # A configuration file whose [lease] windows are ``windows``.
    collector_config: pathlib.Path

    @property
    def is_server(self) -> bool:
        return self.name in ("swift", "s3")

    def past_expiry(self) -> float:
        """Seconds after which an owner that stopped renewing is dead with the backend's grace:
        its expire window, the margin, the grace, one timestamp resolution and some slack."""
        resolution = 1.0 if self.is_server else 0.0
        return self.windows.expire_window + self.margin + self.grace + resolution + 0.3

    @property
    def grace(self) -> float:
        """The collectors' grace: ``GRACE``, and on Swift one that covers its store client's
        retry budget (rule (c) of the configuration gate: the test banks' 4.5 s budget must
        land before the GC's decision, validity + margin + grace after an owner's last renewal)."""
        return SWIFT_GRACE if self.name == "swift" else GRACE

    def pass_args(self, **kwargs) -> dict:
        """``run_pass`` arguments for a collector configured for these test owners: their lease
        windows (the configuration gate holds ``skew_margin + grace`` to 0.1 % of that expire
        window), the margin and ``GRACE``; ``kwargs`` added."""
        args = dict(
            grace=self.grace, skew_margin=self.margin, config_file=str(self.collector_config)
        )
        args.update(kwargs)
        return args

    def run_pass(self, **kwargs) -> "banklease.PassReport":
        """One GC pass with :meth:`pass_args`."""
        return banklease.run_pass(self.bank, **self.pass_args(**kwargs))

    def delete_object(self, key: str) -> None:
        """Delete one object of the bank behind banklease's back (an operator's mistake)."""
        if self.path is not None:
            (self.path / key).unlink()
        elif self.name == "swift":
            swift_delete(self.url, key)
        elif self.name == "s3":
            s3_delete(self.url, key)
        else:
            raise AssertionError(f"cannot delete behind the back of a {self.name} bank")


GRACE = 0.2
# Server banks are opened with a 2 s request timeout and 2 s of retries: a 4.5 s retry budget
# (2 s + a backoff of 0.5 s + 2 s), which on Swift needs a grace above 3 s (see Backend.grace).
CLIENT_LIMITS = dict(request_timeout=2.0, retry_timeout=2.0)
SWIFT_GRACE = 3.5

# A keeper must miss renewals for over a second before a lease is lost: loaded runners stall.
SHORT = dict(renew_window=0.3, expire_window=2.0, validity_window=0.2)
# Servers: a renewal round trip on a loaded 2-core runner can take a good part of a second.
SERVER = dict(renew_window=0.5, expire_window=3.0, validity_window=0.4)


def server_backends() -> List[str]:
    out = []
    if os.environ.get("BANKLEASE_TEST_SWIFT") == "1":
        out.append("swift")
    if os.environ.get("BANKLEASE_TEST_S3") == "1":
        out.append("s3")
    return out


ALL_BACKENDS = ["memory", "file"] + server_backends()


def pytest_report_header(config) -> List[str]:
    notes = []
    if os.environ.get("BANKLEASE_TEST_SWIFT") != "1":
        notes.append("note: Swift tests skipped: set BANKLEASE_TEST_SWIFT=1 (.ci/run starts Swift)")
    if os.environ.get("BANKLEASE_TEST_S3") != "1":
        notes.append("note: S3 tests skipped: set BANKLEASE_TEST_S3=1 (.ci/run starts moto)")
    return notes


def make_backend(name: str, tmp_path: pathlib.Path) -> Backend:
    unique = f"py-{uuid.uuid4().hex}"
    path = None
    if name == "memory":
        url = "memory://"
    elif name == "file":
        path = tmp_path / "bank"
        url = f"file://{path}"
    elif name == "swift":
        url = f"swift://{os.environ.get('SWIFT_CONTAINER', 'banklease-test')}/{unique}"
    elif name == "s3":
        url = f"s3://{os.environ.get('S3_BUCKET', 'banklease-test')}/{unique}"
    else:
        raise AssertionError(name)
    server = name in ("swift", "s3")
    bank = banklease.Bank.open(url, create=True, **(CLIENT_LIMITS if server else {}))
    bank.init()  # as `banklease init`: every owner and pass refuses a URL holding no bank
    windows = SERVER if server else SHORT
    collector_config = tmp_path / f"collector-{unique}.toml"
    collector_config.write_text(
        "[lease]\n" + "".join(f'{k} = "{round(v * 1000)}ms"\n' for k, v in windows.items())
    )
    return Backend(
        name=name,
        url=url,
        bank=bank,
        path=path,
        margin=1.1 if server else 0.05,
        windows=banklease.LeaseWindows(**windows),
        collector_config=collector_config,
    )


@pytest.fixture(params=ALL_BACKENDS)
def backend(request, tmp_path) -> Backend:
    """A fresh bank on every backend available."""
    return make_backend(request.param, tmp_path)


@pytest.fixture(params=[b for b in ALL_BACKENDS if b != "memory"])
def shared_backend(request, tmp_path) -> Backend:
    """A fresh bank on every backend that another process can see (all but memory)."""
    return make_backend(request.param, tmp_path)


@pytest.fixture
def file_backend(tmp_path) -> Backend:
    return make_backend("file", tmp_path)


def eventually(timeout: float, what: str, check: Callable[[], bool]) -> None:
    """Poll ``check`` every 50 ms for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for: {what}")


# --- deleting behind banklease's back (an operator's mistake), on the servers -------------


def _split(url: str, scheme: str) -> tuple:
    rest = url[len(scheme) :]
    container, _, prefix = rest.partition("/")
    return container, prefix


def swift_delete(url: str, key: str) -> None:
    container, prefix = _split(url, "swift://")
    auth = urllib.request.Request(
        os.environ["ST_AUTH"],
        headers={"X-Auth-User": os.environ["ST_USER"], "X-Auth-Key": os.environ["ST_KEY"]},
    )
    with urllib.request.urlopen(auth, timeout=10) as r:
        storage, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
    req = urllib.request.Request(
        f"{storage}/{container}/{prefix}/{key}", method="DELETE", headers={"X-Auth-Token": token}
    )
    with urllib.request.urlopen(req, timeout=10):
        pass


def s3_delete(url: str, key: str) -> None:
    """DELETE one object, signed with AWS Signature Version 4 (the ``AWS_*`` credentials)."""
    bucket, prefix = _split(url, "s3://")
    endpoint = urllib.parse.urlsplit(os.environ["AWS_ENDPOINT"])
    region = os.environ.get("AWS_REGION", "us-east-1")
    access, secret = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
    path = urllib.parse.quote(f"/{bucket}/{prefix}/{key}")
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    empty = hashlib.sha256(b"").hexdigest()
    headers = {"host": endpoint.netloc, "x-amz-content-sha256": empty, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        ["DELETE", path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", signed, empty]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    k = f"AWS4{secret}".encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, "
        f"Signature={signature}"
    )
    req = urllib.request.Request(
        f"{endpoint.scheme}://{endpoint.netloc}{path}", method="DELETE", headers=headers
    )
    with urllib.request.urlopen(req, timeout=10):
        pass


# --- a TCP proxy the tests can pull the plug on ------------------------------------------


class Proxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``close()`` refuses every connection after."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._open = True
        self._conns: List[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self._open:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if not self._open:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while self._open:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    (b if s is a else a).sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()

    def close(self) -> None:
        with self._lock:
            self._open = False
            conns, self._conns = self._conns, []
        self._listener.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


# --- a file: bank whose writes of one key are taken but not answered ---------------------

# Names the `file:` store hides from listings: its staged writes and its lock files.
_HIDDEN = re.compile(r"#[0-9]+$")
_LOCK_PREFIX = ".banklease-lock#"
# The store's locking protocol (every writer of a directory must agree on it): the stripe of a
# key is the first 8 bytes of its SHA-256, big-endian, mod 64.
_STRIPES = 64


def staged_writes(root: pathlib.Path) -> set:
    """The writes a `file:` store holds under hidden names, not yet published."""
    return {
        p
        for p in root.rglob("*")
        if _HIDDEN.search(p.name) and not p.name.startswith(_LOCK_PREFIX)
    }


class HeldStripe:
    """Holds a `file:` bank's lock on ``key`` as another writer process would: a write of
    ``key`` is then taken by the store (its body staged) but not answered until ``release()``
    — a slow store, on demand and without timing guesses."""

    def __init__(self, root: pathlib.Path, key: str) -> None:
        digest = hashlib.sha256(key.encode()).digest()
        stripe = int.from_bytes(digest[:8], "big") % _STRIPES
        self._root = root
        self._fd: Optional[int] = os.open(
            root / f"{_LOCK_PREFIX}{stripe}", os.O_RDWR | os.O_CREAT, 0o644
        )
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._before = staged_writes(root)
        self._lock = threading.Lock()

    def write_taken(self) -> bool:
        """Has the store taken a write since the lock was taken (one now waits for it)?"""
        return bool(staged_writes(self._root) - self._before)

    def release(self) -> None:
        """Let the waiting write through (idempotent; callable from any thread)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> "HeldStripe":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


# --- the Rust GC daemon ------------------------------------------------------------------


def gc_binary() -> pathlib.Path:
    """The ``banklease-gc`` daemon: ``$BANKLEASE_GC_BIN``, or built here with cargo."""
    given = os.environ.get("BANKLEASE_GC_BIN")
    if given:
        return pathlib.Path(given)
    cargo = shutil.which("cargo")
    assert cargo, "the daemon tests need cargo (or BANKLEASE_GC_BIN naming a banklease-gc binary)"
    subprocess.run(
        [cargo, "build", "-q", "-p", "banklease-gc-daemon", "--bin", "banklease-gc"],
        cwd=REPO,
        check=True,
    )
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "debug" / "banklease-gc"


@pytest.fixture(scope="session")
def gc_bin() -> pathlib.Path:
    path = gc_binary()
    assert path.is_file(), f"no banklease-gc binary at {path}"
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def spawn_gc(gc_bin, tmp_path) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start ``banklease-gc`` on a bank; every daemon still running at the end is killed."""
    started: List[subprocess.Popen] = []

    def spawn(url: str, margin: float, grace: float = GRACE, **env: str) -> subprocess.Popen:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("BANKLEASE_")}
        clean.update(
            {
                "BANKLEASE_BANK__URL": url,
                "BANKLEASE_GC__LEASE_RENEW_WINDOW": "200ms",
                "BANKLEASE_GC__LEASE_EXPIRE_WINDOW": "3s",
                "BANKLEASE_GC__LEASE_VALIDITY_WINDOW": "100ms",
                "BANKLEASE_GC__INTERVAL": "300ms",
                "BANKLEASE_GC__GRACE": f"{int(grace * 1000)}ms",
                # The server banks' client limits (a 4.5 s retry budget; no effect on file:).
                "BANKLEASE_BANK__REQUEST_TIMEOUT": "2s",
                "BANKLEASE_BANK__RETRY_TIMEOUT": "2s",
                "BANKLEASE_LEASE__SKEW_MARGIN": f"{int(margin * 1000)}ms",
                "BANKLEASE_LEASE__OWNER_ID_SCHEME": "uuid",
                "RUST_LOG": "info",
            }
        )
        clean.update(env)
        log = open(tmp_path / f"gc-{len(started)}.log", "wb")
        proc = subprocess.Popen(
            [str(gc_bin)], env=clean, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
        proc.log_path = tmp_path / f"gc-{len(started)}.log"  # type: ignore[attr-defined]
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
