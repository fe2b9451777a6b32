"""Type stubs of the extension module ``banklease._banklease`` (see ``banklease``)."""

from __future__ import annotations

import datetime
from types import TracebackType
from typing import Any, Awaitable, Callable, Dict, List, Optional, Type, TypedDict, Union

from .errors import LeaseLost

Seconds = Union[int, float, datetime.timedelta, str]
BytesLike = Union[bytes, bytearray, memoryview]

__version__: str

class Bank:
    """A bank: the object-store prefix holding a protection service's checkpoints and leases."""

    @staticmethod
    def open(
        url: str,
        *,
        create: bool = False,
        request_timeout: Optional[Seconds] = None,
        retry_timeout: Optional[Seconds] = None,
        credentials: Optional[Dict[str, Any]] = None,
    ) -> Bank:
        """Open the bank at ``url`` (``memory://``, ``file:///path``, ``s3://bucket/prefix``,
        ``swift://container/prefix``, ``az://...``, ``gs://...``); sends no request. A
        ``file:`` bank's directory must exist unless ``create`` is true. ``request_timeout``
        and ``retry_timeout`` bound the store client as ``[bank]`` does; a GC pass judges its
        timing rules on the retry budget they give. ``credentials`` replace the
        environment's: ``{"access_key_id", "secret_access_key", "session_token"}`` for S3;
        ``{"cloud": name}`` (``clouds.yaml``) or a cloud's options (``auth_url``,
        ``username``, ``password``, ``project_name``, ``region_name``, ..., flat or under
        ``"auth"``) for Swift. Without them: the AWS chain (keys, ``AWS_PROFILE``, ...),
        ``OS_CLOUD`` or ``ST_*``/``OS_*``."""
    def init(self) -> str:
        """Make this bank a bank (``banklease init``): ``"created"``, ``"adopted"`` or
        ``"already"``. Owners, GC passes and doctor refuse a prefix that holds no bank."""
    def init_async(self) -> Awaitable[str]: ...
    @property
    def label(self) -> str:
        """The bank's URL, without secrets."""
    def check_layout(self) -> None:
        """Raise ``LayoutError`` if the prefix holds no bank, is not a bank, or its layout is
        unknown to this release."""
    def check_layout_async(self) -> Awaitable[None]: ...

class LeaseWindows:
    """The three windows of an owner lease, in seconds (``validity <= renew < expire``)."""

    def __init__(
        self,
        renew_window: Optional[Seconds] = None,
        expire_window: Optional[Seconds] = None,
        validity_window: Optional[Seconds] = None,
    ) -> None: ...
    @property
    def renew_window(self) -> float: ...
    @property
    def expire_window(self) -> float: ...
    @property
    def validity_window(self) -> float: ...
    @property
    def warnings(self) -> List[str]:
        """What these windows get wrong without being invalid."""

class LeaseStatus:
    """A lease's state as its owner knows it."""

    @property
    def name(self) -> str:
        """``"held"``, ``"lost"`` or ``"released"`` (the last two are final)."""
    @property
    def remaining(self) -> float:
        """Seconds of validity left (0 unless held)."""
    @property
    def reason(self) -> Optional[str]:
        """Why the lease was lost."""
    @property
    def held(self) -> bool: ...

class OwnerLease:
    """An owner lease: one lease object per service instance."""

    @staticmethod
    def acquire(
        bank: Bank, windows: Optional[LeaseWindows] = None, owner_id: Optional[str] = None
    ) -> OwnerLease:
        """Acquire a new owner lease (``LeaseExists`` if the id is taken)."""
    @staticmethod
    def acquire_async(
        bank: Bank, windows: Optional[LeaseWindows] = None, owner_id: Optional[str] = None
    ) -> Awaitable[OwnerLease]: ...
    @property
    def owner_id(self) -> str: ...
    @property
    def bank(self) -> Bank: ...
    @property
    def windows(self) -> LeaseWindows: ...
    @property
    def state(self) -> LeaseStatus: ...
    def check_validity(self) -> bool:
        """May an update start now? Zero requests."""
    def ensure_valid(self) -> None:
        """Raise ``NotValid`` or ``LeaseLost`` unless an update may start now."""
    def remaining(self) -> float:
        """Seconds of lease time left. Zero requests."""
    def renew(self) -> float:
        """Renew once; returns the seconds of validity then left. Not cut short by Ctrl-C."""
    def renew_async(self) -> Awaitable[float]:
        """``renew``, awaitable. Cancelling the await does not cut the renewal: it runs to its
        end and counts; the next renewal or release waits for it."""
    def release(self) -> None:
        """Delete the lease object; validity ends for good."""
    def release_async(self) -> Awaitable[None]: ...
    def keep(
        self, on_lost: Optional[Callable[[LeaseLost], Any]] = None, jitter: float = 0.1
    ) -> Keeper:
        """Start the background keeper."""
    def __enter__(self) -> OwnerLease: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[OwnerLease]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

class Keeper:
    """A running keeper (``OwnerLease.keep()``)."""

    @property
    def lease(self) -> OwnerLease: ...
    @property
    def state(self) -> LeaseStatus: ...
    def wait_lost(self, timeout: Optional[Seconds] = None) -> Optional[LeaseLost]:
        """Block until the lease is lost; None when released, stopped or timed out."""
    def wait_lost_async(self) -> Awaitable[Optional[LeaseLost]]: ...
    def stop(self) -> None: ...
    def stop_async(self) -> Awaitable[None]: ...
    def release(self) -> None: ...
    def release_async(self) -> Awaitable[None]: ...
    def __enter__(self) -> Keeper: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[Keeper]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

class Checkpoint:
    """A checkpoint being written (``protecting``) under an owner lease."""

    @staticmethod
    def create(lease: OwnerLease, checkpoint_id: str) -> Checkpoint: ...
    @staticmethod
    def create_async(lease: OwnerLease, checkpoint_id: str) -> Awaitable[Checkpoint]: ...
    @staticmethod
    def adopt(lease: OwnerLease, checkpoint_id: str) -> Checkpoint: ...
    @staticmethod
    def adopt_async(lease: OwnerLease, checkpoint_id: str) -> Awaitable[Checkpoint]: ...
    @property
    def id(self) -> str: ...
    def put_data(self, name: str, data: BytesLike) -> None: ...
    def put_data_async(self, name: str, data: BytesLike) -> Awaitable[None]: ...
    def complete(self, status: str = "available") -> None:
        """``"available"`` or ``"error"``; raises ``Fenced`` if the GC decided first."""
    def complete_async(self, status: str = "available") -> Awaitable[None]: ...

class LeaseView:
    """What an observer found about an owner's lease."""

    @property
    def owner_id(self) -> str: ...
    @property
    def state(self) -> str:
        """``"alive"``, ``"expired"``, ``"missing"`` or ``"unreadable"``."""
    @property
    def ok(self) -> bool:
        """May the owner start an update now?"""
    @property
    def remaining(self) -> float: ...
    @property
    def validity_window(self) -> float: ...
    @property
    def window_source(self) -> str:
        """``"owner"``, ``"given"`` or ``"default"``."""
    @property
    def expired_since(self) -> Optional[float]: ...
    @property
    def error(self) -> Optional[str]: ...
    @property
    def record(self) -> Optional[Dict[str, Any]]: ...
    def __bool__(self) -> bool:
        """Raises TypeError: use ``state`` or ``ok``."""

class LeaseObserver:
    """Judges owners' leases on the store's clock."""

    def __init__(
        self,
        bank: Bank,
        skew_margin: Optional[Seconds] = None,
        read_staleness: Optional[Seconds] = None,
    ) -> None: ...
    def view(self, owner_id: str, validity_window: Optional[Seconds] = None) -> LeaseView: ...
    def view_async(
        self, owner_id: str, validity_window: Optional[Seconds] = None
    ) -> Awaitable[LeaseView]: ...

def read_checkpoint(bank: Bank, checkpoint_id: str) -> Optional[str]:
    """``index.json`` as JSON text (``banklease.read_checkpoint`` parses it)."""

def read_checkpoint_async(bank: Bank, checkpoint_id: str) -> Awaitable[Optional[str]]: ...
class _PassArgs(TypedDict):
    """Every option of ``banklease.run_pass``, ``None`` where not given."""

    dry_run: bool
    force: bool
    grace: Optional[Seconds]
    skew_margin: Optional[Seconds]
    read_staleness: Optional[Seconds]
    concurrency: Optional[int]
    max_deletions: Optional[int]
    reap_leases: Optional[bool]
    config_file: Optional[str]
    beside_daemon: bool

def run_pass(bank: Bank, args: _PassArgs) -> str:
    """One GC pass; the report as JSON text (``banklease.run_pass`` makes a ``PassReport``)."""

def run_pass_async(bank: Bank, args: _PassArgs) -> Awaitable[str]: ...
def delete_checkpoint(
    bank: Bank,
    checkpoint_id: str,
    available: bool,
    dry_run: bool,
    operator: str,
    reason: Optional[str],
    config_file: Optional[str],
) -> str:
    """``checkpoint delete`` of one checkpoint, as JSON text (``banklease.delete_checkpoint``)."""

def doctor(bank: Bank, *, race_rounds: Optional[int] = None) -> str:
    """The measurements as JSON text (``banklease.doctor`` makes a ``DoctorReport``)."""

def doctor_async(bank: Bank, *, race_rounds: Optional[int] = None) -> Awaitable[str]: ...
def requests_sent() -> Dict[str, int]:
    """The HTTP requests this process has sent to stores: ``total``, ``writes`` and each of
    ``GET``, ``HEAD``, ``PUT``, ``POST``, ``DELETE``, ``other``."""
    ...
