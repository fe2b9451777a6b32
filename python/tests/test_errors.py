"""Exceptions and messages for bad input; the package's own documentation and stubs."""

from __future__ import annotations

import ast
import inspect
import json
import os
import pathlib
import pydoc

import pytest

import banklease
from banklease import _banklease, errors


def test_every_exception_is_a_banklease_error():
    for name in errors.__all__:
        cls = getattr(banklease, name)
        assert issubclass(cls, banklease.BankleaseError), name
        assert cls.__doc__, name
    assert issubclass(banklease.ConfigError, ValueError)
    assert issubclass(banklease.InvalidId, ValueError)
    for lease_error in (banklease.LeaseExists, banklease.LeaseLost, banklease.NotValid):
        assert issubclass(lease_error, banklease.LeaseError)


def test_bad_bank_urls():
    with pytest.raises(banklease.ConfigError) as err:
        banklease.Bank.open("ftp://example/bank")
    assert "url=`ftp://example/bank`" in str(err.value)
    with pytest.raises(banklease.ConfigError):
        banklease.Bank.open("")


def test_bad_windows_and_durations():
    with pytest.raises(banklease.ConfigError, match="renew_window < expire_window"):
        banklease.LeaseWindows(renew_window=10, expire_window=10, validity_window=5)
    with pytest.raises(banklease.ConfigError, match="validity_window <= renew_window"):
        banklease.LeaseWindows(renew_window=10, expire_window=30, validity_window=11)
    with pytest.raises(banklease.ConfigError, match="renew_window=`soon` is not a duration"):
        banklease.LeaseWindows(renew_window="soon")
    with pytest.raises(banklease.ConfigError, match="expire_window=`-1"):
        banklease.LeaseWindows(expire_window=-1)
    with pytest.raises(banklease.ConfigError, match="expire_window=`NaN`"):
        banklease.LeaseWindows(expire_window=float("nan"))
    with pytest.raises(ValueError):  # callers catching ValueError catch these too
        banklease.LeaseWindows(validity_window=0)


def test_bad_ids_and_arguments():
    bank = banklease.Bank.open("memory://")
    with pytest.raises(banklease.InvalidId) as err:
        banklease.OwnerLease.acquire(bank, owner_id="a/b")
    assert err.value.kind == "owner" and "a/b" in str(err.value)
    assert err.value.error_kind == "invalid_input"
    lease = banklease.OwnerLease.acquire(bank)
    with pytest.raises(banklease.ConfigError, match="jitter=`0.9`"):
        lease.keep(jitter=0.9)
    with pytest.raises(banklease.InvalidId):
        banklease.LeaseObserver(bank).view("")
    with pytest.raises(banklease.ConfigError, match="concurrency=`0`"):
        banklease.run_pass(bank, concurrency=0)
    with pytest.raises(TypeError):
        banklease.OwnerLease.acquire("memory://")
    lease.release()


def test_store_errors_name_the_request(tmp_path):
    path = tmp_path / "bank"
    bank = banklease.Bank.open(f"file://{path}", create=True)
    assert bank.init() == "created"
    # Where the lease objects go, a regular file: every lease write fails.
    (path / "leases").write_text("")
    with pytest.raises(banklease.StoreError) as err:
        banklease.OwnerLease.acquire(bank, owner_id="svc")
    e = err.value
    assert e.op and "leases" in e.path and isinstance(e.transient, bool) and e.detail
    assert "store request failed" in str(e) and f"op=`{e.op}`" in str(e)
    # An unusable directory is refused when the bank is opened.
    with pytest.raises(banklease.ConfigError, match="is not a directory"):
        banklease.Bank.open(f"file://{path / 'leases'}")


def test_a_url_that_holds_no_bank_is_refused_and_left_alone(tmp_path):
    # A mistyped directory: refused when opened, and not created.
    typo = tmp_path / "typo-bank"
    with pytest.raises(banklease.LayoutError, match="its directory does not exist") as err:
        banklease.Bank.open(f"file://{typo}")
    assert "banklease --bank" in str(err.value) and "init" in str(err.value)
    assert not typo.exists()
    # An existing empty directory: no owner, pass or check takes it for an empty bank.
    empty = tmp_path / "empty"
    empty.mkdir()
    bank = banklease.Bank.open(f"file://{empty}")
    for call in (
        lambda: banklease.OwnerLease.acquire(bank),
        lambda: banklease.run_pass(bank),
        lambda: banklease.LeaseObserver(bank, skew_margin=0.05).view("someone"),
        lambda: banklease.read_checkpoint(bank, "cp-1"),
        bank.check_layout,
    ):
        with pytest.raises(banklease.LayoutError, match="no bank at") as err:
            call()
        assert err.value.bank == bank.label
        assert err.value.error_kind == "not_a_bank"
    assert list(empty.iterdir()) == []
    # Made a bank, it works.
    assert bank.init() == "created"
    assert bank.init() == "already"
    banklease.OwnerLease.acquire(bank).release()


@pytest.mark.skipif(os.environ.get("BANKLEASE_TEST_S3") != "1", reason="needs S3 (moto)")
def test_a_missing_bucket_is_named():
    bank = banklease.Bank.open("s3://no-such-bucket-banklease/p")
    with pytest.raises(banklease.StoreError) as err:
        banklease.OwnerLease.acquire(bank)
    assert "bucket or container does not exist" in str(err.value), err.value
    assert not err.value.transient


def test_an_unknown_layout_is_refused(tmp_path):
    path = tmp_path / "bank"
    path.mkdir()
    (path / "banklease.json").write_text(
        json.dumps(
            {"format": 1, "layout": 99, "created_by": "banklease 9.0.0",
             "created_at": "2026-01-01T00:00:00Z"}
        )
    )
    bank = banklease.Bank.open(f"file://{path}")
    for call in (
        lambda: banklease.OwnerLease.acquire(bank),
        lambda: banklease.run_pass(bank),
        lambda: banklease.doctor(bank),
        bank.check_layout,
    ):
        with pytest.raises(banklease.LayoutError, match="layout 99") as err:
            call()
        assert err.value.bank == bank.label
    assert sorted(p.name for p in path.iterdir()) == ["banklease.json"]


def test_help_is_useful():
    text = pydoc.render_doc(banklease, renderer=pydoc.plaintext)
    for needle in ("OwnerLease", "check_validity", "Zero requests", "run_pass", "Fenced",
                   "asyncio", "LeaseWindows"):
        assert needle in text, needle
    for cls in (banklease.OwnerLease, banklease.Checkpoint, banklease.Keeper,
                banklease.LeaseObserver, banklease.Bank):
        for name, member in inspect.getmembers(cls):
            if not name.startswith("_") and callable(member):
                assert member.__doc__, f"{cls.__name__}.{name} has no docstring"


def test_the_stub_matches_the_extension():
    """Every class, method and function of the extension is in `_banklease.pyi`, and the stub
    names nothing the extension lacks."""
    stub = pathlib.Path(_banklease.__file__).with_name("_banklease.pyi")
    if not stub.exists():  # an editable install runs from the source tree
        stub = pathlib.Path(banklease.__file__).with_name("_banklease.pyi")
    tree = ast.parse(stub.read_text())
    stubbed = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            stubbed[node.name] = {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stubbed[node.name] = None
    public = {n for n in dir(_banklease) if not n.startswith("_")}
    # Private stub names (`_PassArgs`) are typing-only: they exist in no module at run time.
    stubbed = {n: m for n, m in stubbed.items() if not n.startswith("_")}
    assert set(stubbed) == public, set(stubbed) ^ public
    for name, methods in stubbed.items():
        if methods is None:
            assert callable(getattr(_banklease, name)), name
            continue
        cls = getattr(_banklease, name)
        real = {n for n in cls.__dict__ if not n.startswith("_")}
        assert {m for m in methods if not m.startswith("_")} == real, (name, methods ^ real)
        for dunder in {m for m in methods if m.startswith("__")} - {"__init__"}:
            assert hasattr(cls, dunder), f"stub names {name}.{dunder}, the extension lacks it"


def test_a_lease_view_has_no_truth_value():
    bank = banklease.Bank.open("memory://")
    view = banklease.LeaseObserver(bank, skew_margin=0.05).view("nobody")
    assert view.state == "missing" and view.ok is False
    with pytest.raises(TypeError, match="no truth value"):
        bool(view)


@pytest.mark.skipif(os.environ.get("BANKLEASE_TEST_S3") != "1", reason="needs S3 (moto)")
def test_an_observer_refuses_a_margin_below_the_stamp_resolution():
    bank = banklease.Bank.open(f"s3://{os.environ.get('S3_BUCKET', 'banklease-test')}/py-margin")
    bank.init()
    with pytest.raises(banklease.ConfigError, match="timestamp resolution"):
        banklease.LeaseObserver(bank, skew_margin=0.05).view("someone")


def test_the_package_exports_only_its_api():
    """`import banklease` holds its API (`__all__`) and its submodules, not the helpers it was
    written with (`json`, `dataclasses`, `typing`'s names)."""
    public = {name for name in dir(banklease) if not name.startswith("_")}
    assert public - set(banklease.__all__) - {"errors", "compat"} == set()
    for name in banklease.__all__:
        assert hasattr(banklease, name), name
    # The dataclasses still work without the names their annotations use.
    import dataclasses
    import json

    fields = {f.name: None for f in dataclasses.fields(banklease.PassReport)}
    report = banklease.PassReport._from_json(json.dumps({**fields, "scanned": 1, "waiting": ["x"]}))
    assert report.scanned == 1 and report.waiting == ["x"]
