"""The exceptions banklease raises.

Every exception keeps the Rust library's message, which says what went wrong and what to do,
with its details as ``key=`value``` pairs; the same details are attributes of the exception.
The class follows the error's kind (the library's ``ErrorKind``), which every exception raised
for a library error also carries as ``.error_kind``: ``"invalid_input"``, ``"not_a_bank"``,
``"refused_by_store"``, ``"lost"``, ``"not_valid"``, ``"fenced"``, ``"unavailable"``,
``"transient"``, ``"store"``, ``"corrupt"``, ``"unsupported"`` or ``"clock"``.

::

    BankleaseError
    ├── ConfigError (also ValueError)    bad windows, durations, URLs, configuration
    ├── InvalidId (also ValueError)      an owner or checkpoint id unusable in a path
    ├── StoreError                       the store failed or refused (.op, .path, .transient)
    ├── LayoutError                      no bank, not a bank, or an unknown layout
    ├── Unsupported                      the store cannot give a guarantee leases rest on
    ├── LeaseError
    │   ├── LeaseExists                  the owner id is taken
    │   ├── LeaseLost                    final: stop writing (.owner_id, .reason)
    │   └── NotValid                     too little validity left (.remaining, .validity_window)
    ├── CheckpointError
    │   ├── Fenced                       the GC collected it first (.decided_by, .outcome)
    │   ├── CheckpointExists
    │   └── CheckpointAmbiguous          create may have landed: adopt it or use a new id
    ├── ClockStep                        the store's clock stepped (or unverified); nothing deleted
    └── CorruptObject                    an object in the bank cannot be parsed
"""

from __future__ import annotations

__all__ = [
    "BankleaseError",
    "ConfigError",
    "InvalidId",
    "StoreError",
    "LayoutError",
    "Unsupported",
    "LeaseError",
    "LeaseExists",
    "LeaseLost",
    "NotValid",
    "CheckpointError",
    "Fenced",
    "CheckpointExists",
    "CheckpointAmbiguous",
    "ClockStep",
    "CollectorActive",
    "CorruptObject",
]


class BankleaseError(Exception):
    """Base class of every banklease error."""


class ConfigError(BankleaseError, ValueError):
    """A bad value: lease windows, a duration, a bank URL, the configuration file."""


class InvalidId(BankleaseError, ValueError):
    """An owner or checkpoint id that cannot be part of an object path (``.kind``, ``.id``)."""


class StoreError(BankleaseError):
    """A request to the object store failed.

    ``.op`` and ``.path`` name the request, ``.transient`` says whether retrying may help,
    ``.detail`` is the store's full error chain. Also raised when the store or the file system
    refused the credentials before any one request (``.error_kind == "refused_by_store"``;
    ``.op`` and ``.path`` are then ``None``, ``.bank`` names the bank).
    """


class LayoutError(BankleaseError):
    """The bank's descriptor names a layout this release does not know, the prefix is not a
    bank's, or it holds no bank at all (a mistyped URL, or ``Bank.init()`` not run) (``.bank``)."""


class Unsupported(BankleaseError):
    """The bank's store cannot give a guarantee the operation rests on (``.bank``,
    ``.usage``); run ``banklease doctor``."""


class LeaseError(BankleaseError):
    """Base class of the owner-lease errors."""


class LeaseExists(LeaseError):
    """A lease object for this owner id already exists (``.owner_id``): ids are unique per
    process, never reuse a crashed process's id."""


class LeaseLost(LeaseError):
    """The lease is lost: deleted, replaced, or its validity ran out before a renewal
    succeeded (``.owner_id``, ``.reason``). Final: stop updating checkpoints and start again
    under a new owner id."""


class NotValid(LeaseError):
    """Too little validity is left to start an update (``.remaining``,
    ``.validity_window``, in seconds): wait for the keeper to renew, or give up."""


class CheckpointError(BankleaseError):
    """Base class of the checkpoint errors (``.checkpoint_id``)."""


class Fenced(CheckpointError):
    """The checkpoint was moved out of ``protecting`` by someone else — the GC collected it
    (``.decided_by``, ``.outcome``). Do not report it as available."""


class CheckpointExists(CheckpointError):
    """A checkpoint with this id already exists: use a new id."""


class CheckpointAmbiguous(CheckpointError):
    """A create may have landed but could not be read back: call ``Checkpoint.adopt`` to take
    it up, or use a new id."""


class ClockStep(BankleaseError):
    """The store's clock stepped between two readings (``.step``, ``.direction``), or the GC's
    clock probe could not be read back (a lagging replica); the GC pass was aborted and deleted
    nothing. Check the store host's time service (or ``gc.read_staleness``)."""


class CollectorActive(BankleaseError):
    """``run_pass`` refused: the gc daemon ``.holder`` (on ``.holder_host``, pid ``.holder_pid``)
    holds ``gc/active`` on this bank. Let it collect, stop it, or pass ``beside_daemon=True``."""


class CorruptObject(BankleaseError):
    """An object in the bank cannot be parsed (``.path``): inspect it (``banklease checkpoint
    explain ID`` says what to do about a checkpoint's records)."""
