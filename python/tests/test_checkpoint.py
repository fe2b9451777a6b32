"""Checkpoints from Python: create, data, complete; Fenced after the GC collected."""

from __future__ import annotations

import asyncio
import time

import pytest

import banklease


def test_create_put_complete(backend):
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    with lease.keep():
        cp = banklease.Checkpoint.create(lease, "cp-0001")
        assert cp.id == "cp-0001"
        record = banklease.read_checkpoint(backend.bank, "cp-0001")
        assert record.status == "protecting" and record.owner_id == lease.owner_id
        cp.put_data("disk0", b"\x00" * 1024)
        cp.put_data("disk1", bytearray(b"abc"))
        cp.put_data("meta.json", memoryview(b'{"k": 1}'))
        cp.complete("available")
        assert banklease.read_checkpoint(backend.bank, "cp-0001").status == "available"

        failed = banklease.Checkpoint.create(lease, "cp-0002")
        failed.complete("error")
        assert banklease.read_checkpoint(backend.bank, "cp-0002").status == "error"
    assert banklease.read_checkpoint(backend.bank, "never-made") is None


def test_create_and_complete_asyncio(backend):
    async def main():
        lease = await banklease.OwnerLease.acquire_async(backend.bank, backend.windows)
        async with lease.keep():
            cps = await asyncio.gather(
                *(banklease.Checkpoint.create_async(lease, f"a-{i}") for i in range(4))
            )
            await asyncio.gather(*(cp.put_data_async("d", b"x" * 100) for cp in cps))
            await asyncio.gather(*(cp.complete_async() for cp in cps))
            records = await asyncio.gather(
                *(banklease.read_checkpoint_async(backend.bank, cp.id) for cp in cps)
            )
            assert [r.status for r in records] == ["available"] * 4

    asyncio.run(main())


def test_a_taken_id_and_bad_input_are_refused(backend):
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    cp = banklease.Checkpoint.create(lease, "taken")
    with pytest.raises(banklease.CheckpointExists) as err:
        banklease.Checkpoint.create(lease, "taken")
    assert err.value.checkpoint_id == "taken"
    with pytest.raises(banklease.InvalidId) as err:
        banklease.Checkpoint.create(lease, "../escape")
    assert err.value.kind == "checkpoint" and isinstance(err.value, ValueError)
    with pytest.raises(banklease.ConfigError, match="use \"available\" or \"error\""):
        cp.complete("deleted")
    with pytest.raises(banklease.ConfigError, match="unknown checkpoint status `done`"):
        cp.complete("done")
    with pytest.raises(TypeError, match="data must be bytes, bytearray or memoryview, not int"):
        cp.put_data("d", 12345)
    with pytest.raises(TypeError):
        cp.put_data("d", "text is not bytes")
    # Nothing of the refused calls changed the checkpoint.
    assert banklease.read_checkpoint(backend.bank, "taken").status == "protecting"
    lease.release()


def test_no_update_starts_once_validity_has_run_out(backend):
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    cp = banklease.Checkpoint.create(lease, "late")
    time.sleep(backend.windows.expire_window)
    for attempt in (
        lambda: cp.put_data("d", b"x"),
        lambda: cp.complete("available"),
        lambda: banklease.Checkpoint.create(lease, "later"),
    ):
        with pytest.raises(banklease.LeaseError):
            attempt()
    assert banklease.read_checkpoint(backend.bank, "late").status == "protecting"
    assert banklease.read_checkpoint(backend.bank, "later") is None


def test_an_owner_whose_checkpoint_the_gc_collected_is_fenced(shared_backend):
    """An operator deletes a live owner's lease object. The GC times the missing lease from
    when it first saw it missing and collects after grace; the owner, whose lease is still
    valid in its own memory, is then fenced: its completion is refused, nothing is revived."""
    b = shared_backend
    windows = banklease.LeaseWindows(renew_window=30, expire_window=120, validity_window=20)
    lease = banklease.OwnerLease.acquire(b.bank, windows)
    cp = banklease.Checkpoint.create(lease, "victim")
    cp.put_data("disk0", b"data")
    b.delete_object(f"leases/{lease.owner_id}")

    first = b.run_pass()
    assert (first.scanned, first.collected, first.in_grace) == (1, 0, 1), first
    time.sleep(b.grace + b.margin + (1.0 if b.is_server else 0.0) + 0.2)
    second = b.run_pass()
    assert second.collected == 1, second
    assert banklease.read_checkpoint(b.bank, "victim").status == "deleted"

    assert lease.check_validity()  # the owner did not notice ...
    with pytest.raises(banklease.Fenced) as err:  # ... until it tried to complete
        cp.complete("available")
    assert err.value.checkpoint_id == "victim"
    assert err.value.decided_by == "gc"
    assert "do not report it as available" in str(err.value)
    assert banklease.read_checkpoint(b.bank, "victim").status == "deleted"
