"""banklease: owner leases, checkpoint indexes and a safe GC for protection services.

A protection (backup) service writes checkpoints into a *bank* in object storage. While a
checkpoint is written its status is ``protecting``; each running instance of the service is an
*owner* and keeps one lease object in the bank. Once an owner's lease is gone on the store's
clock, its protecting checkpoints are zombies the GC collects — and never while it is alive.

Blocking style::

    import banklease

    bank = banklease.Bank.open("file:///var/lib/bank")
    windows = banklease.LeaseWindows(renew_window=30, expire_window=120, validity_window=20)
    lease = banklease.OwnerLease.acquire(bank, windows)
    with lease.keep(on_lost=lambda err: print("stop writing:", err)):
        cp = banklease.Checkpoint.create(lease, "cp-0001")
        cp.put_data("disk0", b"...")       # checks validity first (no request)
        cp.complete("available")            # raises Fenced if the GC collected it
    # leaving the block released the lease (and raised LeaseLost had it been lost inside)

asyncio style: every call that sends requests has an ``*_async`` twin returning an awaitable
(``await banklease.OwnerLease.acquire_async(bank, windows)``, ``await cp.complete_async()``,
``async with lease.keep(): ...``).

Admin side: ``LeaseObserver(bank).view(owner_id)`` judges a lease on the store's clock,
``run_pass(bank)`` runs one GC pass (the daemon's engine), ``doctor(bank)`` measures what the
store enforces. ``banklease.compat.BankPluginLease`` offers the seed design's bank-plugin
names (``acquire_lease``, ``renew_lease``, ``check_lease_validity``, ``check_lease_existence``).

Durations are seconds (int or float) or ``datetime.timedelta``. Errors are the exceptions of
``banklease.errors`` (all under ``BankleaseError``).
"""

from __future__ import annotations

import dataclasses as _dataclasses
import json as _json
from typing import Any, Dict, List, Optional, Union

from ._banklease import (
    Bank,
    Checkpoint,
    Keeper,
    LeaseObserver,
    LeaseStatus,
    LeaseView,
    LeaseWindows,
    OwnerLease,
    __version__,
    requests_sent,
)
from . import _banklease
from .errors import (
    BankleaseError,
    CheckpointAmbiguous,
    CheckpointError,
    CheckpointExists,
    ClockStep,
    CollectorActive,
    ConfigError,
    CorruptObject,
    Fenced,
    InvalidId,
    LayoutError,
    LeaseError,
    LeaseExists,
    LeaseLost,
    NotValid,
    StoreError,
    Unsupported,
)

__all__ = [
    "Seconds",
    "Bank",
    "Checkpoint",
    "CheckpointRecord",
    "DoctorReport",
    "Keeper",
    "LeaseObserver",
    "LeaseStatus",
    "LeaseView",
    "LeaseWindows",
    "OwnerLease",
    "PassReport",
    "delete_checkpoint",
    "doctor",
    "doctor_async",
    "read_checkpoint",
    "read_checkpoint_async",
    "requests_sent",
    "run_pass",
    "run_pass_async",
    "__version__",
    # errors
    "BankleaseError",
    "CheckpointAmbiguous",
    "CheckpointError",
    "CheckpointExists",
    "ClockStep",
    "CollectorActive",
    "ConfigError",
    "CorruptObject",
    "Fenced",
    "InvalidId",
    "LayoutError",
    "LeaseError",
    "LeaseExists",
    "LeaseLost",
    "NotValid",
    "StoreError",
    "Unsupported",
]

Seconds = Union[int, float, "datetime.timedelta", str]  # noqa: F821 (documentation only; str: "2s", "1m 30s")


@_dataclasses.dataclass(frozen=True)
class PassReport:
    """What one GC pass did (the daemon's ``PassReport``).

    Counts are of protecting checkpoints (``scanned``, ``collected``, ...) and of their owners
    (``owners``, ``alive``, ``in_grace``, ``dead``, ``unreadable``). ``braked`` says why the
    safety brake refused the pass (nothing was collected). ``problems`` names what the pass
    could not handle, one ``{"object", "error"}`` per error (the first 100; ``problems_omitted``
    counts the rest): each is left for the next pass. ``requests`` counts the store
    requests by kind. Durations are in milliseconds, as in the daemon's JSON log.
    """

    scanned: int
    owners: int
    alive: int
    in_grace: int
    dead: int
    unreadable: int
    collected: int
    repaired: int
    skipped: int
    errors: int
    problems: List[Dict[str, str]]
    problems_omitted: int
    late_data_swept: int
    leases_reaped: int
    temporaries_swept: int
    dry_run: bool
    braked: Optional[str]
    requests: Dict[str, int]
    duration_ms: int
    protecting: Dict[str, int]
    leases: Dict[str, int]
    oldest_zombie_age_ms: int
    #: ``"held"`` (the pass held ``gc/active``), ``"beside"`` (``beside_daemon=True`` beside the
    #: active daemon ``holder``) or ``"not-needed"`` (a dry run takes no lease).
    gc_lease: str = "held"
    holder: Optional[str] = None
    #: Owners (and checkpoints) held back past the grace because what they declared needs
    #: longer (their retry budget, on a store whose create-if-absent is timing only).
    waiting: List[str] = _dataclasses.field(default_factory=list)
    #: Every checkpoint the pass collected, retired, repaired or skipped (in a dry run: would
    #: have), one ``{"checkpoint_id", "owner_id", "action", "reason"}`` each, ``action`` one of
    #: ``"collect"``, ``"retire"``, ``"repair"``, ``"skip"`` (the first 100,000;
    #: ``checkpoints_omitted`` counts the rest).
    checkpoints: List[Dict[str, str]] = _dataclasses.field(default_factory=list)
    checkpoints_omitted: int = 0
    #: Owners dead by their lease's stamp but held back by the store-clock floor (a step was
    #: seen after their last renewal), and when the last of them is collectable (store clock).
    held_back: int = 0
    held_back_until: Optional[str] = None
    #: What the pass's store-clock checks found (a floor dropped or holding stamps back, a step
    #: confirmed), one line each.
    clock: List[str] = _dataclasses.field(default_factory=list)
    #: What the pass met in the bank that banklease did not write, kept (a symbolic link in a
    #: ``file:`` bank, a name in one of its folders it does not write), one line each.
    foreign: List[str] = _dataclasses.field(default_factory=list)

    @classmethod
    def _from_json(cls, text: str) -> "PassReport":
        data = _json.loads(text)
        names = {f.name for f in _dataclasses.fields(cls)}
        # A newer extension may report more than this class knows: keep what it knows.
        return cls(**{k: v for k, v in data.items() if k in names})


@_dataclasses.dataclass(frozen=True)
class DoctorReport:
    """What ``doctor`` measured: ``supported`` is True when the bank supports owner leases and
    the GC; ``verdicts`` says what each guarantee rests on; ``diagnosis`` holds the
    measurements (the JSON of ``banklease doctor --json``)."""

    supported: bool
    verdicts: Dict[str, Any]
    diagnosis: Dict[str, Any]


@_dataclasses.dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint's ``index.json``: its owner and status (``protecting``, ``available``,
    ``error``, ``deleting``, ``deleted``, ``error-deleting``)."""

    id: str
    owner_id: str
    status: str
    created_at: str
    format: int


def _record(text: Optional[str]) -> Optional[CheckpointRecord]:
    if text is None:
        return None
    data = _json.loads(text)
    names = {f.name for f in _dataclasses.fields(CheckpointRecord)}
    return CheckpointRecord(**{k: v for k, v in data.items() if k in names})


def run_pass(
    bank: Bank,
    *,
    dry_run: bool = False,
    force: bool = False,
    grace: Optional[Seconds] = None,
    skew_margin: Optional[Seconds] = None,
    read_staleness: Optional[Seconds] = None,
    concurrency: Optional[int] = None,
    max_deletions: Optional[int] = None,
    reap_leases: Optional[bool] = None,
    config_file: Optional[str] = None,
    beside_daemon: bool = False,
) -> PassReport:
    """Run one GC pass on ``bank`` with the engine of the ``banklease-gc`` daemon.

    Collects the protecting checkpoints of owners whose lease is gone on the store's clock
    (expired past ``grace``, or missing), and never one whose owner is alive or whose lease
    cannot be read. Options default to ``config_file``'s ``[gc]`` and ``[lease]`` sections (or
    the built-in defaults); the arguments override them. ``dry_run`` plans and reports only;
    ``force`` lets a pass through that the safety brake would refuse. Raises ``ConfigError``
    when ``skew_margin`` is below the store's timestamp resolution, ``ClockStep`` when the
    store's clock stepped (nothing was deleted), ``StoreError`` when the bank cannot be read.

    Like ``banklease gc``, the pass holds the bank's ``gc/active`` while it runs, so its
    evidence names this collector; it raises ``CollectorActive`` while a gc daemon holds it,
    unless ``beside_daemon`` (a dry run takes no lease). Its first store-clock reading is
    checked against the last one any pass on this host recorded, so a forward step since then
    raises ``ClockStep`` instead of collecting.

    A pass that completes may still have left work: check ``report.errors`` (each one leaves
    its checkpoint for the next pass) and ``report.braked`` (the safety brake refused the pass;
    rerun with ``force=True`` if that many owners really died).
    """
    return PassReport._from_json(
        _banklease.run_pass(
            bank,
            dict(
                dry_run=dry_run,
                force=force,
                grace=grace,
                skew_margin=skew_margin,
                read_staleness=read_staleness,
                concurrency=concurrency,
                max_deletions=max_deletions,
                reap_leases=reap_leases,
                config_file=config_file,
                beside_daemon=beside_daemon,
            ),
        )
    )


def delete_checkpoint(
    bank: Bank,
    checkpoint_id: str,
    *,
    operator: str,
    available: bool = False,
    dry_run: bool = False,
    reason: Optional[str] = None,
    config_file: Optional[str] = None,
) -> Dict[str, Any]:
    """Delete one checkpoint as ``banklease checkpoint delete`` does, and say what became of it.

    A failed (``error``) checkpoint goes, an ``available`` one only with ``available=True``, and
    a ``protecting`` one only once its owner is proved dead as a GC pass judges it (with
    ``config_file``'s rules, or the defaults): then it is decided and collected as a pass
    collects it, so an owner's completion racing it wins or loses whole. Data first, then
    records, which keep ``operator`` and ``reason`` for ``checkpoint explain``.

    Returns a dict: ``checkpoint_id``, ``dry_run`` and ``outcome`` — ``"deleted"`` (with
    ``owner_id``, ``was``: its status before, ``objects``: data objects deleted),
    ``"already_deleted"`` (with ``owner_id``) or ``"refused"`` (with ``reason``: why, and what
    to do; nothing of it was deleted). Raises ``StoreError`` when the bank cannot be read,
    ``CorruptObject`` for a record that cannot be read (``checkpoint resolve`` handles it).
    """
    return _json.loads(
        _banklease.delete_checkpoint(
            bank, checkpoint_id, available, dry_run, operator, reason, config_file
        )
    )


async def run_pass_async(
    bank: Bank,
    *,
    dry_run: bool = False,
    force: bool = False,
    grace: Optional[Seconds] = None,
    skew_margin: Optional[Seconds] = None,
    read_staleness: Optional[Seconds] = None,
    concurrency: Optional[int] = None,
    max_deletions: Optional[int] = None,
    reap_leases: Optional[bool] = None,
    config_file: Optional[str] = None,
    beside_daemon: bool = False,
) -> PassReport:
    """``run_pass``, for asyncio."""
    return PassReport._from_json(
        await _banklease.run_pass_async(
            bank,
            dict(
                dry_run=dry_run,
                force=force,
                grace=grace,
                skew_margin=skew_margin,
                read_staleness=read_staleness,
                concurrency=concurrency,
                max_deletions=max_deletions,
                reap_leases=reap_leases,
                config_file=config_file,
                beside_daemon=beside_daemon,
            ),
        )
    )


def _doctor(text: str) -> DoctorReport:
    data = _json.loads(text)
    return DoctorReport(
        supported=data["supported"], verdicts=data["verdicts"], diagnosis=data["diagnosis"]
    )


def doctor(bank: Bank, *, race_rounds: Optional[int] = None) -> DoctorReport:
    """Measure what ``bank``'s store enforces (conditional writes, races, clock, expiry), as
    ``banklease doctor`` does; writes and removes its own probe objects only."""
    return _doctor(_banklease.doctor(bank, race_rounds=race_rounds))


async def doctor_async(bank: Bank, *, race_rounds: Optional[int] = None) -> DoctorReport:
    """``doctor``, for asyncio."""
    return _doctor(await _banklease.doctor_async(bank, race_rounds=race_rounds))


def read_checkpoint(bank: Bank, checkpoint_id: str) -> Optional[CheckpointRecord]:
    """Read checkpoint ``checkpoint_id``'s ``index.json``; None when there is none. Raises
    ``LayoutError`` when the bank's URL holds no bank (a typo must not read as "no such
    checkpoint")."""
    return _record(_banklease.read_checkpoint(bank, checkpoint_id))


async def read_checkpoint_async(bank: Bank, checkpoint_id: str) -> Optional[CheckpointRecord]:
    """``read_checkpoint``, for asyncio."""
    return _record(await _banklease.read_checkpoint_async(bank, checkpoint_id))


# Only the API is the package's namespace (`__all__`): the helpers it was written with go.
# Annotations are strings here (`from __future__ import annotations`), so nothing needs them at
# run time.
del Any, Dict, List, Optional, Union, annotations
