"""The seed design's bank-plugin names (banklease.compat), and where they are stricter."""

from __future__ import annotations

import os
import shutil
import time

import pytest

import banklease
from banklease.compat import BankPluginLease
from conftest import eventually


def test_the_plugin_names_work_as_before(backend):
    plugin = BankPluginLease(backend.bank, backend.windows, skew_margin=backend.margin)
    assert not plugin.check_lease_validity()  # not acquired yet
    plugin.acquire_lease()
    plugin.acquire_lease()  # again while held: nothing happens
    owner = plugin.get_owner_id()
    assert owner and owner == plugin.owner_id
    assert plugin.check_lease_validity()
    plugin.renew_lease()
    assert plugin.check_lease_existence(owner)
    assert not plugin.check_lease_existence("nobody-has-this-id")
    # Renewed in the background (the seed design's looping call).
    time.sleep(backend.windows.expire_window * 1.5)
    assert plugin.check_lease_validity()
    plugin.release_lease()
    assert not plugin.check_lease_validity()
    assert not plugin.check_lease_existence(owner)


def test_check_lease_existence_writes_nothing(backend):
    """A reader's question costs reads only: the store's clock is judged by the `Date` of its
    answer (on servers; on `file:` the host's clock), never by writing a probe."""
    # Not renewed in the background: its renewals would be writes of this process.
    owner = BankPluginLease(backend.bank, backend.windows, keep=False)
    owner.acquire_lease()
    admin = BankPluginLease(backend.bank, backend.windows, skew_margin=backend.margin)
    try:
        before = banklease.requests_sent()
        assert admin.check_lease_existence(owner.get_owner_id())
        assert not admin.check_lease_existence("nobody-has-this-id")
        after = banklease.requests_sent()
        assert after["writes"] == before["writes"], (before, after)
        if backend.name in ("swift", "s3"):
            assert after["total"] > before["total"], (before, after)
    finally:
        owner.release_lease()


def test_a_forked_child_holds_none_of_its_parents_lease(file_backend):
    plugin = BankPluginLease(file_backend.bank, file_backend.windows)
    plugin.acquire_lease()
    try:
        assert plugin.check_lease_validity()
        assert plugin.lease is not None and plugin.lease.owner_id == plugin.get_owner_id()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: answers without touching the runtime, then leaves at once
            try:
                valid = plugin.check_lease_validity()
                left = plugin.lease.remaining()
                os.write(w, b"%d %f" % (valid, left))
            finally:
                os._exit(0)
        os.close(w)
        answer = os.read(r, 64).decode()
        os.close(r)
        os.waitpid(pid, 0)
        assert answer.split()[0] == "0", answer
        assert float(answer.split()[1]) == 0.0, answer
        assert plugin.check_lease_validity()
    finally:
        plugin.release_lease()


def test_a_plugin_creates_checkpoints_under_the_lease_it_holds(file_backend):
    plugin = BankPluginLease(file_backend.bank, file_backend.windows)
    assert plugin.lease is None
    plugin.acquire_lease()
    try:
        checkpoint = banklease.Checkpoint.create(plugin.lease, "cp-plugin-1")
        assert checkpoint.id == "cp-plugin-1"
    finally:
        plugin.release_lease()


def test_renewing_by_hand(backend):
    plugin = BankPluginLease(backend.bank, backend.windows, keep=False)
    plugin.acquire_lease()
    deadline = time.monotonic() + backend.windows.expire_window * 2
    while time.monotonic() < deadline:
        plugin.renew_lease()
        assert plugin.check_lease_validity()
        time.sleep(backend.windows.renew_window / 2)
    # Stop renewing: validity ends before the lease expires (validity_window earlier).
    eventually(backend.windows.expire_window + 1, "validity ends", lambda: not plugin.check_lease_validity())


def test_stricter_an_expired_lease_object_is_not_an_existing_lease(backend):
    """The seed design answered existence by whether the object was there; an expired lease
    whose object the store has not removed yet counts as gone here."""
    owner = BankPluginLease(backend.bank, backend.windows, keep=False)
    owner.acquire_lease()
    admin = BankPluginLease(backend.bank, skew_margin=backend.margin)
    assert admin.check_lease_existence(owner.get_owner_id())
    time.sleep(backend.past_expiry())
    view = banklease.LeaseObserver(backend.bank, skew_margin=backend.margin).view(owner.owner_id)
    assert view.state == "expired" and view.record is not None  # the object is still there
    assert not admin.check_lease_existence(owner.get_owner_id())


def test_stricter_renewal_failures_are_reported_and_lost_is_final(file_backend):
    plugin = BankPluginLease(file_backend.bank, file_backend.windows, keep=False)
    with pytest.raises(banklease.LeaseError, match="acquire_lease"):
        plugin.renew_lease()
    plugin.acquire_lease()
    shutil.rmtree(file_backend.path)
    # The seed design logged this and carried on.
    with pytest.raises(banklease.LeaseLost):
        plugin.renew_lease()
    assert not plugin.check_lease_validity()
    with pytest.raises(banklease.LeaseLost, match="never taken again under the same owner id"):
        plugin.acquire_lease()


def test_stricter_doubt_is_an_error_not_an_answer(file_backend):
    plugin = BankPluginLease(file_backend.bank, file_backend.windows)
    plugin.acquire_lease()
    owner = plugin.get_owner_id()
    lease_file = file_backend.path / "leases" / owner
    plugin.release_lease()
    lease_file.parent.mkdir(parents=True, exist_ok=True)
    lease_file.write_text("not a lease")
    with pytest.raises(banklease.StoreError, match="cannot judge the lease") as err:
        BankPluginLease(file_backend.bank).check_lease_existence(owner)
    assert err.value.transient and err.value.path == f"leases/{owner}" and err.value.detail
