"""Owner leases from Python: acquire, renew, release, validity from memory, the keeper."""

from __future__ import annotations

import asyncio
import datetime
import gc
import os
import shutil
import signal
import threading
import time
import urllib.parse

import pytest

import banklease
from conftest import Proxy, eventually, make_backend


def test_acquire_renew_release(backend):
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    assert lease.check_validity()
    lease.ensure_valid()
    expire = backend.windows.expire_window
    assert 0 < lease.remaining() <= expire
    assert lease.state.name == "held" and lease.state.held
    left = lease.renew()
    assert 0 < left <= expire
    # An observer sees it alive, with the owner's own windows.
    view = banklease.LeaseObserver(backend.bank, skew_margin=backend.margin).view(lease.owner_id)
    assert view.state == "alive", view
    assert view.record["owner_id"] == lease.owner_id
    assert view.record["expire_window_ms"] == int(expire * 1000)
    lease.release()
    assert not lease.check_validity()
    assert lease.state.name == "released" and lease.remaining() == 0
    with pytest.raises(banklease.LeaseLost):
        lease.ensure_valid()
    view = banklease.LeaseObserver(backend.bank, skew_margin=backend.margin).view(lease.owner_id)
    assert view.state == "missing" and not view.ok and view.record is None


def test_an_owner_id_is_never_taken_twice(backend):
    first = banklease.OwnerLease.acquire(backend.bank, backend.windows, owner_id="svc-a")
    with pytest.raises(banklease.LeaseExists) as err:
        banklease.OwnerLease.acquire(backend.bank, backend.windows, owner_id="svc-a")
    assert err.value.owner_id == "svc-a"
    assert "owner_id=`svc-a`" in str(err.value)
    assert isinstance(err.value, banklease.LeaseError)
    first.release()


def test_validity_is_answered_from_memory(file_backend):
    """With the bank's directory gone, validity is still answered (no request is sent) and
    counts down; only a renewal finds out."""
    lease = banklease.OwnerLease.acquire(file_backend.bank, file_backend.windows)
    shutil.rmtree(file_backend.path)
    before = lease.remaining()
    for _ in range(10_000):
        assert lease.check_validity()
    assert lease.remaining() < before
    with pytest.raises(banklease.LeaseLost) as err:
        lease.renew()
    assert err.value.owner_id == lease.owner_id
    assert not lease.check_validity()
    assert lease.state.name == "lost"


def test_validity_runs_out_without_renewals(backend):
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    w = backend.windows
    eventually(w.expire_window + 1, "validity runs out", lambda: not lease.check_validity())
    # Less than validity_window left: an update may not start.
    assert lease.remaining() < w.validity_window
    with pytest.raises(banklease.LeaseError) as err:
        lease.ensure_valid()
    assert isinstance(err.value, (banklease.NotValid, banklease.LeaseLost))
    if isinstance(err.value, banklease.NotValid):
        assert err.value.validity_window == pytest.approx(w.validity_window)
        assert err.value.remaining < w.validity_window


def test_the_keeper_keeps_the_lease_through_several_expire_windows(backend):
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    with lease.keep() as keeper:
        deadline = time.monotonic() + 3 * backend.windows.expire_window
        while time.monotonic() < deadline:
            assert keeper.state.name == "held", keeper.state
            time.sleep(0.05)
        assert keeper.state.held
        view = banklease.LeaseObserver(backend.bank, skew_margin=backend.margin).view(
            lease.owner_id
        )
        assert view.state == "alive", view
    # Leaving the block released the lease.
    assert lease.state.name == "released"
    assert keeper.wait_lost(timeout=0.1) is None


def test_the_keeper_reports_lost_when_the_lease_object_disappears(file_backend):
    lease = banklease.OwnerLease.acquire(file_backend.bank, file_backend.windows)
    called = []
    done = threading.Event()

    def on_lost(err):
        called.append(err)
        done.set()

    keeper = lease.keep(on_lost=on_lost)
    shutil.rmtree(file_backend.path)
    err = keeper.wait_lost(timeout=5)
    assert isinstance(err, banklease.LeaseLost), err
    assert err.owner_id == lease.owner_id and err.reason
    assert done.wait(5), "on_lost was not called"
    assert len(called) == 1 and isinstance(called[0], banklease.LeaseLost)
    assert keeper.state.name == "lost" and keeper.state.reason
    assert not lease.check_validity()
    keeper.release()  # releasing a lost lease deletes nothing and does not fail


@pytest.mark.skipif(os.environ.get("BANKLEASE_TEST_S3") != "1", reason="needs S3 (moto)")
def test_the_keeper_reports_lost_when_the_store_becomes_unreachable(tmp_path, monkeypatch):
    """The store goes away (connections refused): renewals fail, validity runs out, Lost."""
    endpoint = urllib.parse.urlsplit(os.environ["AWS_ENDPOINT"])
    proxy = Proxy(endpoint.hostname, endpoint.port)
    monkeypatch.setenv("AWS_ENDPOINT", f"http://127.0.0.1:{proxy.port}")
    backend = make_backend("s3", tmp_path)
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    lost = threading.Event()
    keeper = lease.keep(on_lost=lambda err: lost.set())
    time.sleep(backend.windows.renew_window * 2)
    assert keeper.state.held
    proxy.close()
    started = time.monotonic()
    err = keeper.wait_lost(timeout=backend.windows.expire_window + 10)
    assert isinstance(err, banklease.LeaseLost), err
    # Lost no later than the validity the last renewal gave (plus scheduling slack).
    assert time.monotonic() - started <= backend.windows.expire_window + 2
    assert lost.wait(5)
    assert not lease.check_validity()
    with pytest.raises(banklease.LeaseLost):
        banklease.Checkpoint.create(lease, "after-the-store-went-away")


def test_asyncio_style(backend):
    async def main():
        lease = await banklease.OwnerLease.acquire_async(backend.bank, backend.windows)
        async with lease.keep() as keeper:
            await asyncio.sleep(backend.windows.renew_window * 3)
            assert keeper.state.held
            left = await lease.renew_async()
            assert left > 0
            # No loss to wait for: the awaitable does not complete while the lease is held.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(keeper.wait_lost_async(), timeout=0.3)
        assert lease.state.name == "released"
        assert await keeper.wait_lost_async() is None

    asyncio.run(main())


def test_wait_lost_async_completes_with_the_loss(file_backend):
    async def main():
        lease = await banklease.OwnerLease.acquire_async(file_backend.bank, file_backend.windows)
        keeper = lease.keep()
        waiter = asyncio.ensure_future(keeper.wait_lost_async())
        await asyncio.sleep(0.1)
        assert not waiter.done()
        shutil.rmtree(file_backend.path)
        err = await asyncio.wait_for(waiter, timeout=5)
        assert isinstance(err, banklease.LeaseLost)
        await keeper.release_async()

    asyncio.run(main())


def test_a_stopped_keeper_leaves_the_lease_to_run_out(backend):
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    keeper = lease.keep()
    waiter = []
    thread = threading.Thread(target=lambda: waiter.append(keeper.wait_lost(timeout=30)))
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    keeper.stop()
    # Stopping wakes the waiters at once: nothing more will be reported.
    thread.join(10)
    assert waiter == [None] and time.monotonic() - started < 5
    assert keeper.wait_lost(timeout=30) is None
    eventually(backend.windows.expire_window + 1, "validity runs out", lambda: not lease.check_validity())
    view = banklease.LeaseObserver(backend.bank, skew_margin=backend.margin).view(lease.owner_id)
    # The object is still there (a crash looks the same): the GC judges it by its age.
    assert view.state in ("alive", "expired")


def test_windows_accept_seconds_and_timedeltas():
    w = banklease.LeaseWindows(
        renew_window=datetime.timedelta(seconds=30), expire_window=120, validity_window=20.5
    )
    assert (w.renew_window, w.expire_window, w.validity_window) == (30.0, 120.0, 20.5)
    assert w.warnings == []
    d = banklease.LeaseWindows()
    assert (d.renew_window, d.expire_window, d.validity_window) == (120.0, 600.0, 100.0)
    risky = banklease.LeaseWindows(renew_window=10, expire_window=15, validity_window=5)
    assert any("single failed renewal" in w for w in risky.warnings)


def test_a_loss_inside_a_with_block_is_raised_at_its_end(file_backend):
    lease = banklease.OwnerLease.acquire(file_backend.bank, file_backend.windows)
    with pytest.raises(banklease.LeaseLost) as err:
        with lease.keep() as keeper:
            shutil.rmtree(file_backend.path)
            assert isinstance(keeper.wait_lost(timeout=10), banklease.LeaseLost)
    assert err.value.owner_id == lease.owner_id
    # Lost stays lost: leaving the block (which releases) did not turn it into "released".
    assert lease.state.name == "lost" and keeper.state.name == "lost"
    assert isinstance(keeper.wait_lost(timeout=1), banklease.LeaseLost)
    # An exception already on its way is not replaced.
    other = banklease.OwnerLease.acquire(banklease.Bank.open("memory://"), file_backend.windows)
    with pytest.raises(KeyError):
        with other:
            raise KeyError("the body's own error")


def test_dropping_the_keeper_object_does_not_stop_renewals(backend):
    lease = banklease.OwnerLease.acquire(backend.bank, backend.windows)
    lease.keep()  # the Keeper object is dropped at once
    gc.collect()
    time.sleep(backend.windows.expire_window * 2)
    assert lease.check_validity(), lease.state
    with pytest.raises(banklease.BankleaseError, match="a keeper already runs"):
        lease.keep()
    lease.release()  # the detached keeper stops once it sees the release
    assert lease.state.name == "released"


def test_ctrl_c_interrupts_a_blocking_wait(file_backend):
    lease = banklease.OwnerLease.acquire(file_backend.bank, file_backend.windows)
    keeper = lease.keep()

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            keeper.wait_lost(timeout=30)
        assert time.monotonic() - started < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert keeper.state.held  # the keeper itself was not interrupted
    keeper.release()


def test_a_forked_child_gets_a_clear_error_not_a_hang():
    bank = banklease.Bank.open("memory://")
    banklease.OwnerLease.acquire(bank).release()  # the runtime is started in this process
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what happened through the pipe, then leave at once
        os.close(read)
        try:
            banklease.OwnerLease.acquire(bank)
            message = "no error"
        except banklease.BankleaseError as e:
            message = str(e)
        except BaseException as e:  # noqa: BLE001 - anything else is the test's failure
            message = f"{type(e).__name__}: {e}"
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    message = os.read(read, 4096).decode()
    os.close(read)
    assert status == 0
    assert "forked from pid=" in message and "spawn" in message, message


def test_durations_are_numbers_or_timedeltas_not_bools():
    with pytest.raises(banklease.ConfigError, match="renew_window=`True` is not a duration"):
        banklease.LeaseWindows(renew_window=True)


def test_windows_and_durations_take_the_configurations_strings():
    """The configuration writes `"2s"`, `"1m 30s"`: so do the windows and every duration
    argument; a string that is no duration is refused naming the key."""
    w = banklease.LeaseWindows(renew_window="30s", expire_window="2m", validity_window="20s 500ms")
    assert (w.renew_window, w.expire_window, w.validity_window) == (30.0, 120.0, 20.5)
    bank = banklease.Bank.open("memory://", request_timeout="2s", retry_timeout="1m 30s")
    assert bank is not None
    with pytest.raises(banklease.ConfigError) as err:
        banklease.LeaseWindows(renew_window="soon", expire_window=120, validity_window=20)
    assert "renew_window" in str(err.value) and "soon" in str(err.value)
