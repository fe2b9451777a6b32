"""The seed design's bank-plugin lease names, over banklease.

A protection service written against the OpenStack bank plugin's lease interface
(``acquire_lease()``, ``renew_lease()``, ``check_lease_validity()``,
``check_lease_existence(owner_id)``, ``get_owner_id()``) can switch by constructing a
``BankPluginLease`` where it constructed its plugin::

    from banklease import Bank, LeaseWindows
    from banklease.compat import BankPluginLease

    lease = BankPluginLease(Bank.open("swift://bank"), LeaseWindows(30, 120, 20))
    lease.acquire_lease()              # and starts renewing in the background
    if lease.check_lease_validity():   # before every update of a checkpoint
        ...

Where the semantics are stricter than the seed design's:

- **Send-time expiry.** A lease expires ``expire_window`` after the *send time* of its last
  successful write, not after the answer came back; a slow answer shortens validity instead
  of extending it.
- **The store's clock.** ``check_lease_existence`` judges the lease object's age on the
  store's clock (with a skew margin in the owner's favour), never on this host's wall clock,
  and says True while the owner may still be alive: an expired lease object that the store
  has not removed yet is *not* an existing lease, a lease within the margin of its expiry is.
- **Renewal failures are reported, not swallowed.** ``renew_lease()`` raises ``StoreError``
  (or ``LeaseLost``) instead of logging; with ``keep=True`` the background keeper retries and
  reports a loss through ``on_lost`` and ``check_lease_validity()``.
- **Lost is final.** Once lost (deleted, replaced, or validity ran out before a renewal
  succeeded), ``check_lease_validity()`` stays False and ``renew_lease()`` raises
  ``LeaseLost``; make a new ``BankPluginLease`` (a new owner id) to start again.
- **Doubt is an error, not an answer.** ``check_lease_existence`` raises ``StoreError`` when the
  lease cannot be read or judged; it never answers False on doubt.
- **Validity is time left, counted with suspends.** ``check_lease_validity()`` is True while at
  least ``validity_window`` of lease time is left, on a clock that counts time the host spent
  suspended; it sends no request. In a process forked from the holder it is False: the lease
  and its keeper are the parent's.
- **No ``lease_expire_time``.** The seed design kept the expiry as an attribute on this host's
  wall clock; banklease never judges a lease on a host's clock (it may step, and it is not the
  store's), so there is none. Use ``check_lease_validity()`` or ``lease.remaining()`` for this
  process's lease, ``check_lease_existence(owner_id)`` for anyone's.
- **No re-acquiring.** The seed design took a lost lease again under the same owner id; here a
  lost lease is final (another owner may have judged it dead and collected its checkpoints):
  make a new ``BankPluginLease``.
- **The lease itself.** ``lease`` is the ``OwnerLease`` held (None before ``acquire_lease()``):
  a bank plugin creates its checkpoints under it, ``Checkpoint.create(plugin.lease, id)``.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from ._banklease import Bank, Keeper, LeaseObserver, LeaseWindows, OwnerLease
from .errors import LeaseError, LeaseLost, StoreError

__all__ = ["BankPluginLease"]


class BankPluginLease:
    """An owner lease under the seed design's bank-plugin names.

    ``keep=True`` (the default) renews in the background from ``acquire_lease()`` on, as the
    seed design's looping call did; with ``keep=False`` the caller calls ``renew_lease()``
    every ``renew_window`` itself. ``skew_margin`` (default 2 s; at least the store's timestamp
    resolution, checked) and ``read_staleness`` (default 0; how old a read may be on this store)
    are the observer's, for ``check_lease_existence``: use the GC's values.
    """

    def __init__(
        self,
        bank: Bank,
        windows: Optional[LeaseWindows] = None,
        owner_id: Optional[str] = None,
        *,
        keep: bool = True,
        on_lost: Optional[Callable[[LeaseLost], None]] = None,
        skew_margin: Optional[float] = None,
        read_staleness: Optional[float] = None,
    ) -> None:
        self._bank = bank
        self._windows = windows
        self._owner_id = owner_id
        self._keep = keep
        self._on_lost = on_lost
        self._observer = LeaseObserver(bank, skew_margin=skew_margin, read_staleness=read_staleness)
        self._lease: Optional[OwnerLease] = None
        self._keeper: Optional[Keeper] = None
        self._lock = threading.Lock()

    @property
    def owner_id(self) -> Optional[str]:
        """This owner's id (None before ``acquire_lease()`` unless one was given)."""
        return self._lease.owner_id if self._lease is not None else self._owner_id

    @property
    def lease(self) -> Optional[OwnerLease]:
        """The ``OwnerLease`` this plugin holds (None before ``acquire_lease()``): a bank plugin
        creates its checkpoints under it (``Checkpoint.create(lease, ...)``), so that every write
        is checked against the lease it holds."""
        return self._lease

    def get_owner_id(self) -> Optional[str]:
        """The seed design's name for ``owner_id``."""
        return self.owner_id

    def acquire_lease(self) -> None:
        """Acquire this owner's lease (create-if-absent) and, with ``keep=True``, start
        renewing it. A second call while the lease is held does nothing; after a loss it raises
        ``LeaseLost`` (lost is final)."""
        with self._lock:
            if self._lease is not None:
                state = self._lease.state
                if state.name == "held":
                    return
                why = (
                    f"lease lost: owner_id=`{self._lease.owner_id}` reason=`{state.reason}`"
                    if state.name == "lost"
                    else f"lease released: owner_id=`{self._lease.owner_id}`"
                )
                raise LeaseLost(
                    f"{why}; a lease is never taken again under the same owner id: make a new "
                    "BankPluginLease (a new owner id) to start again"
                )
            self._lease = OwnerLease.acquire(self._bank, self._windows, self._owner_id)
            if self._keep:
                self._keeper = self._lease.keep(on_lost=self._on_lost)

    def renew_lease(self) -> None:
        """Renew now. Raises ``StoreError`` when the renewal fails and ``LeaseLost`` when the
        lease is gone — the seed design logged and swallowed both."""
        self._held().renew()

    def check_lease_validity(self) -> bool:
        """True while at least ``validity_window`` of lease time is left: an update may start.
        No request is sent. False before ``acquire_lease()``, for good once lost or released,
        and in a process forked from this one (the lease and its keeper are the parent's)."""
        lease = self._lease
        return lease is not None and lease.check_validity()

    def check_lease_existence(self, owner_id: str) -> bool:
        """Whether ``owner_id``'s lease is alive on the store's clock (three requests).

        False only when the lease is provably gone: missing, or expired beyond the skew margin.
        Raises ``StoreError`` when it cannot be read or judged.
        """
        view = self._observer.view(owner_id)
        if view.state == "unreadable":
            error = StoreError(
                f"cannot judge the lease of owner_id=`{owner_id}`: {view.error}; "
                "treat the owner as alive and try again"
            )
            error.op, error.path = "get", f"leases/{owner_id}"
            error.transient, error.detail = True, view.error
            raise error
        return view.state == "alive"

    def release_lease(self) -> None:
        """Stop renewing and delete the lease object (orderly shutdown)."""
        with self._lock:
            if self._keeper is not None:
                self._keeper.release()
            elif self._lease is not None:
                self._lease.release()

    def _held(self) -> OwnerLease:
        if self._lease is None:
            raise LeaseError(
                f"no lease: owner_id=`{self._owner_id}`: acquire_lease() was not called; "
                "call it first"
            )
        return self._lease
