"""The GC from Python (one pass) and a Python owner's zombies collected by the Rust daemon."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

import banklease
from conftest import eventually, make_backend


LIVE_WINDOWS = banklease.LeaseWindows(renew_window=1, expire_window=30, validity_window=0.5)


def lease_windows_config(w) -> dict:
    """``[lease]`` windows for a GC's configuration, as ``BANKLEASE_LEASE__*`` variables: the
    owners' own. A configuration is refused when 0.1 % of its expire window (what an owner's clock
    may lose) exceeds skew margin + grace, as the default 10 m would against these tests' grace."""
    ms = lambda seconds: f"{round(seconds * 1000)}ms"  # noqa: E731
    return {
        "BANKLEASE_LEASE__RENEW_WINDOW": ms(w.renew_window),
        "BANKLEASE_LEASE__EXPIRE_WINDOW": ms(w.expire_window),
        "BANKLEASE_LEASE__VALIDITY_WINDOW": ms(w.validity_window),
    }


def zombies_and_a_live_owner(b):
    """A dead owner (stopped renewing: a crash) with two protecting checkpoints, and a live one
    with one protecting and one completed checkpoint."""
    dead = banklease.OwnerLease.acquire(b.bank, b.windows)
    for i in range(2):
        cp = banklease.Checkpoint.create(dead, f"zombie-{i}")
        cp.put_data("disk0", b"z" * 100)
        cp.put_data("disk1", b"z" * 100)
    live = banklease.OwnerLease.acquire(b.bank, LIVE_WINDOWS)
    keeper = live.keep()
    banklease.Checkpoint.create(live, "in-progress").put_data("disk0", b"l")
    banklease.Checkpoint.create(live, "done").complete("available")
    return dead, live, keeper


def test_one_pass_collects_a_python_owners_zombies_and_nothing_else(backend):
    b = backend
    dead, live, keeper = zombies_and_a_live_owner(b)

    early = b.run_pass()
    assert (early.scanned, early.collected, early.alive) == (3, 0, 2), early

    time.sleep(b.past_expiry())
    dry = b.run_pass(dry_run=True)
    assert dry.dry_run and dry.collected == 2 and dry.dead == 1, dry
    # Every checkpoint named: what would go, whose, and why; what stays, and why.
    named = {c["checkpoint_id"]: c for c in dry.checkpoints}
    assert {i for i, c in named.items() if c["action"] == "collect"} == {"zombie-0", "zombie-1"}
    assert named["zombie-0"]["owner_id"] == dead.owner_id
    assert named["zombie-0"]["reason"].startswith("its owner's lease expired ")
    assert named["in-progress"] == {
        "checkpoint_id": "in-progress",
        "owner_id": live.owner_id,
        "action": "skip",
        "reason": "its owner's lease is alive",
    }
    assert dry.checkpoints_omitted == 0
    assert banklease.read_checkpoint(b.bank, "zombie-0").status == "protecting"

    report = b.run_pass()
    assert isinstance(report, banklease.PassReport)
    assert (report.scanned, report.collected, report.dead, report.alive) == (3, 2, 1, 1), report
    assert report.errors == 0 and report.braked is None
    assert report.requests.get("delete", 0) > 0
    for i in range(2):
        assert banklease.read_checkpoint(b.bank, f"zombie-{i}").status == "deleted"
    assert banklease.read_checkpoint(b.bank, "in-progress").status == "protecting"
    assert banklease.read_checkpoint(b.bank, "done").status == "available"
    assert live.check_validity()
    keeper.release()


def test_run_pass_asyncio(backend):
    async def main():
        return await banklease.run_pass_async(backend.bank, **backend.pass_args())

    report = asyncio.run(main())
    assert report.scanned == 0 and report.errors == 0


def test_the_brake_holds_a_mass_collection_unless_forced(file_backend, tmp_path):
    """Options come from a configuration file (here a brake that trips at 2 checkpoints),
    arguments override them."""
    b = file_backend
    config = tmp_path / "banklease.toml"
    w = b.windows
    config.write_text(
        # The owners' windows: with the default 10 m expire window, 0.1 % of it (600 ms) would
        # exceed margin + grace and the configuration be refused.
        f'[lease]\nrenew_window = "{round(w.renew_window * 1000)}ms"\n'
        f'expire_window = "{round(w.expire_window * 1000)}ms"\n'
        f'validity_window = "{round(w.validity_window * 1000)}ms"\nskew_margin = "50ms"\n'
        '[gc]\ngrace = "200ms"\nbrake_min = 2\nbrake_ratio = 0.5\n'
    )
    dead = banklease.OwnerLease.acquire(b.bank, b.windows)
    for i in range(3):
        banklease.Checkpoint.create(dead, f"z-{i}")
    time.sleep(b.past_expiry())
    braked = banklease.run_pass(b.bank, config_file=str(config))
    assert braked.braked and braked.collected == 0, braked
    assert sorted((c["checkpoint_id"], c["action"], c["reason"]) for c in braked.checkpoints) == [
        (f"z-{i}", "skip", "the safety brake refused the pass") for i in range(3)
    ]
    assert "--force" in braked.braked or "force" in braked.braked
    assert banklease.read_checkpoint(b.bank, "z-0").status == "protecting"
    forced = banklease.run_pass(b.bank, config_file=str(config), force=True)
    assert forced.braked is None and forced.collected == 3, forced
    with pytest.raises(banklease.ConfigError, match="missing.toml"):
        banklease.run_pass(b.bank, config_file=str(tmp_path / "missing.toml"))


def test_arguments_are_held_to_the_rules_every_entry_point_uses(file_backend):
    """``grace`` and ``skew_margin`` pass the configuration gate as ``banklease gc`` and the
    daemon would: with the default 10 m expire window, 0.1 % of it (600 ms) must fit in them."""
    with pytest.raises(banklease.ConfigError, match="raise gc.grace to at least") as err:
        banklease.run_pass(file_backend.bank, grace=0.2, skew_margin=0.05)
    assert "gc.grace=`200ms`" in str(err.value), err.value


@pytest.mark.skipif(os.environ.get("BANKLEASE_TEST_S3") != "1", reason="needs S3 (moto)")
def test_the_configuration_is_judged_on_the_bank_given_not_the_files_own_url(tmp_path):
    """A configuration file written for a ``file:`` bank (no store client, no retry budget) is
    refused for an S3 bank whose client may land an owner's write 3m 45s after it was sent."""
    b = make_backend("s3", tmp_path)
    # The client's default limits (the test banks are opened with a 4.5 s budget).
    bank = banklease.Bank.open(b.url)
    config = tmp_path / "for-a-file-bank.toml"
    config.write_text(
        f'[bank]\nurl = "file://{tmp_path}/elsewhere"\n'
        + b.collector_config.read_text()
        + '[gc]\nlate_write_window = "1m"\n'
    )
    with pytest.raises(banklease.ConfigError, match="gc.late_write_window=`1m` needs") as err:
        banklease.run_pass(bank, config_file=str(config), grace=0.5, skew_margin=1.1)
    assert "s3://" in str(err.value), err.value


@pytest.mark.skipif(os.environ.get("BANKLEASE_TEST_S3") != "1", reason="needs S3 (moto)")
def test_a_margin_below_the_stores_stamp_resolution_is_refused(tmp_path):
    # S3 stamps whole seconds (file: and Swift's X-Timestamp are finer).
    b = make_backend("s3", tmp_path)
    with pytest.raises(banklease.ConfigError, match="timestamp resolution") as err:
        banklease.run_pass(b.bank, skew_margin=0.01)
    assert "skew_margin=`10ms`" in str(err.value)


def test_doctor(backend):
    report = banklease.doctor(backend.bank, race_rounds=2)
    assert isinstance(report, banklease.DoctorReport)
    assert report.supported is True, report.verdicts
    assert set(report.verdicts) == {
        "owner_lease", "completion_vs_collection", "named_locks", "fenced_writes"}
    assert report.diagnosis["bank"] == backend.bank.label, report.diagnosis
    assert report.diagnosis["create_if_absent"] == "enforced", report.diagnosis


def test_a_python_owners_zombies_are_collected_by_the_rust_daemon(shared_backend, spawn_gc):
    b = shared_backend
    dead, live, keeper = zombies_and_a_live_owner(b)
    # The longest-lived owner's windows describe the owners to the daemon's configuration; on
    # Swift the grace covers the 4.5 s retry budget of the daemon's client (rule (c)).
    daemon = spawn_gc(b.url, b.margin, b.grace, **lease_windows_config(LIVE_WINDOWS))
    try:
        eventually(
            60,
            "the daemon collects both zombies",
            lambda: all(
                banklease.read_checkpoint(b.bank, f"zombie-{i}").status == "deleted"
                for i in range(2)
            ),
        )
        # The live owner's work is untouched, and stays so over further passes.
        time.sleep(1.5)
        assert banklease.read_checkpoint(b.bank, "in-progress").status == "protecting"
        assert banklease.read_checkpoint(b.bank, "done").status == "available"
        assert live.check_validity()
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=30)
        log = daemon.log_path.read_text(errors="replace")
    assert code == 0, log
    assert "collected" in log, log
    keeper.release()


def test_run_pass_holds_gc_active_and_refuses_beside_an_active_daemon(file_backend, spawn_gc):
    b = file_backend
    active = b.path / "gc" / "active"
    report = b.run_pass()
    assert report.gc_lease == "held", report
    assert not active.exists(), "the pass released gc/active"

    daemon = spawn_gc(b.url, b.margin, b.grace, **lease_windows_config(b.windows))
    try:
        eventually(30, "the daemon holds gc/active", active.exists)
        with pytest.raises(banklease.CollectorActive) as refused:
            b.run_pass()
        assert refused.value.holder and "beside_daemon=True" in str(refused.value)
        assert refused.value.error_kind == "unavailable"
        beside = b.run_pass(beside_daemon=True)
        assert beside.gc_lease == "beside" and beside.holder == refused.value.holder, beside
        # A dry run deletes nothing and takes no lease.
        assert b.run_pass(dry_run=True).gc_lease == "not-needed"
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


STEPPED_PASS = """
import sys, banklease
bank = banklease.Bank.open(sys.argv[1])
try:
    r = banklease.run_pass(bank, grace=float(sys.argv[2]), skew_margin=float(sys.argv[3]),
                           config_file=sys.argv[4])
    print(f"collected={r.collected} reaped={r.leases_reaped} alive={r.alive}")
except banklease.ClockStep as e:
    print(f"ClockStep: {e}")
"""


def test_a_one_shot_pass_from_a_process_whose_clock_is_ahead_collects_nothing_of_a_live_owner(
    file_backend, tmp_path
):
    """A `Collector` in a process whose clock reads 40 s ahead (faketime): on a file: bank the
    store's clock is the file system's, stamped and read by the kernel, so the pass judges the
    live owner alive instead of 39 s dead, and takes nothing for a step."""
    import shutil
    import subprocess
    import sys

    if shutil.which("faketime") is None:
        assert not os.environ.get("BANKLEASE_TEST_FAKETIME"), "faketime(1) is needed"
        pytest.skip("faketime(1) is not installed (apt-get install faketime)")
    b = file_backend
    live = banklease.OwnerLease.acquire(b.bank, b.windows)
    keeper = live.keep()
    banklease.Checkpoint.create(live, "in-progress")
    before = b.run_pass()
    assert (before.alive, before.collected) == (1, 0), before

    script = tmp_path / "stepped.py"
    script.write_text(STEPPED_PASS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANKLEASE_")}
    env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    out = subprocess.run(
        ["faketime", "-f", "+40s", sys.executable, str(script), b.url, str(b.grace),
         str(b.margin), str(b.collector_config)],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("collected=0 reaped=0 alive=1"), (out.stdout, out.stderr)
    assert banklease.read_checkpoint(b.bank, "in-progress").status == "protecting"
    assert live.check_validity()
    assert (b.path / "leases" / str(live.owner_id)).exists()
    keeper.release()


def test_delete_checkpoint_removes_a_failed_one_and_refuses_what_may_not_go(backend):
    b = backend
    owner = banklease.OwnerLease.acquire(b.bank, b.windows)
    keeper = owner.keep()
    failed = banklease.Checkpoint.create(owner, "failed-1")
    failed.put_data("disk0", b"partial")
    failed.complete("error")
    banklease.Checkpoint.create(owner, "done-1").complete("available")
    banklease.Checkpoint.create(owner, "live-1")

    dry = banklease.delete_checkpoint(b.bank, "failed-1", operator="py-ops", dry_run=True)
    assert (dry["outcome"], dry["was"], dry["dry_run"]) == ("deleted", "error", True), dry
    assert banklease.read_checkpoint(b.bank, "failed-1").status == "error"

    done = banklease.delete_checkpoint(b.bank, "failed-1", operator="py-ops", reason="bad disk")
    assert (done["outcome"], done["was"], done["objects"]) == ("deleted", "error", 1), done
    assert done["owner_id"] == owner.owner_id
    assert banklease.read_checkpoint(b.bank, "failed-1").status == "deleted"

    available = banklease.delete_checkpoint(b.bank, "done-1", operator="py-ops")
    assert available["outcome"] == "refused" and "--available" in available["reason"], available
    live = banklease.delete_checkpoint(b.bank, "live-1", operator="py-ops")
    assert live["outcome"] == "refused" and "its lease is alive" in live["reason"], live
    assert banklease.read_checkpoint(b.bank, "done-1").status == "available"
    assert banklease.read_checkpoint(b.bank, "live-1").status == "protecting"

    again = banklease.delete_checkpoint(b.bank, "done-1", operator="py-ops", available=True)
    assert (again["outcome"], again["was"]) == ("deleted", "available"), again
    keeper.release()
