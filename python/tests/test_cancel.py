"""A renewal cut after its write was sent: the write must still count.

A renewal whose write landed but was never recorded leaves the owner an object it does not
recognise: the next renewal reads it back, finds an unknown token and declares the lease lost.
The store here is a `file:` bank whose write of the lease key waits on a lock held by the test
(``HeldStripe``): taken by the store, not answered until the test lets it through.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time

import pytest

import banklease
from conftest import HeldStripe, eventually

# Long enough that no validity runs out while a write is held back on a loaded runner.
WINDOWS = dict(renew_window=2.0, expire_window=10.0, validity_window=1.0)


def generation(backend, lease) -> int:
    """The generation of the lease object as it is in the bank now."""
    record = json.loads((backend.path / "leases" / lease.owner_id).read_text())
    return record["generation"]


async def until(timeout: float, what: str, check) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("next_call", ["after_it_landed", "while_it_is_in_flight"])
def test_a_renewal_cancelled_mid_write_still_counts(file_backend, next_call):
    async def main():
        lease = await banklease.OwnerLease.acquire_async(
            file_backend.bank, banklease.LeaseWindows(**WINDOWS)
        )
        first = generation(file_backend, lease)

        async def renew():
            return await lease.renew_async()

        with HeldStripe(file_backend.path, f"leases/{lease.owner_id}") as held:
            task = asyncio.create_task(renew())
            await until(10, "the renewal's write is taken by the store", held.write_taken)
            task.cancel()
            # The await is cancelled at once, without waiting for the store's answer.
            done, _ = await asyncio.wait({task}, timeout=5)
            assert task in done and task.cancelled()
            assert generation(file_backend, lease) == first
            if next_call == "while_it_is_in_flight":
                following = asyncio.create_task(renew())
                await asyncio.sleep(0.2)
                assert not following.done()
        # The store answers now: the cancelled renewal's write lands.
        if next_call == "after_it_landed":
            landed = lambda: generation(file_backend, lease) > first  # noqa: E731
            await until(10, "the cancelled write lands", landed)
            following = asyncio.create_task(renew())
        left = await asyncio.wait_for(following, timeout=10)
        assert 0 < left <= WINDOWS["expire_window"]
        assert lease.check_validity(), lease.state
        assert lease.state.held
        # Both renewals landed, in order: the cancelled one was recorded, then built on.
        assert generation(file_backend, lease) == first + 2
        await lease.release_async()
        assert lease.state.name == "released"
        assert not (file_backend.path / "leases" / lease.owner_id).exists()

    asyncio.run(main())


def test_ctrl_c_does_not_cut_a_blocking_renewal_mid_write(file_backend):
    lease = banklease.OwnerLease.acquire(file_backend.bank, banklease.LeaseWindows(**WINDOWS))
    first = generation(file_backend, lease)
    main_thread = threading.get_ident()

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with HeldStripe(file_backend.path, f"leases/{lease.owner_id}") as held:

            def ctrl_c_then_answer():
                try:
                    eventually(10, "the renewal's write is taken by the store", held.write_taken)
                    signal.pthread_kill(main_thread, signal.SIGALRM)
                    # Ten times the interval at which blocking calls look for signals.
                    time.sleep(1.0)
                finally:
                    held.release()

            helper = threading.Thread(target=ctrl_c_then_answer)
            helper.start()
            interrupted = False
            try:
                lease.renew()
                # The pending KeyboardInterrupt surfaces here at the latest.
                for _ in range(100):
                    time.sleep(0.01)
            except KeyboardInterrupt:
                interrupted = True
            helper.join(20)
            assert interrupted
    finally:
        signal.signal(signal.SIGALRM, previous)
    landed = lambda: generation(file_backend, lease) > first  # noqa: E731
    eventually(10, "the interrupted renewal's write lands", landed)
    assert lease.renew() > 0
    assert lease.check_validity(), lease.state
    assert generation(file_backend, lease) == first + 2
    lease.release()
