"""Credentials given in code (``Bank.open(..., credentials=...)``) instead of the process's
environment, as a bank plugin holding them in its own configuration passes them."""

from __future__ import annotations

import json
import os
import uuid

import pytest

import banklease


def test_a_credentials_dict_is_checked_before_any_request():
    with pytest.raises(ValueError, match="both `access_key_id` and `secret_access_key`"):
        banklease.Bank.open("s3://b/p", credentials={"access_key_id": "a"})
    with pytest.raises(ValueError, match="`region` is not an S3 credential"):
        banklease.Bank.open(
            "s3://b/p",
            credentials={"access_key_id": "a", "secret_access_key": "s", "region": "x"},
        )
    with pytest.raises(ValueError, match="`cloud` names a cloud of clouds.yaml"):
        banklease.Bank.open("swift://c/p", credentials={"cloud": "x", "username": "u"})
    with pytest.raises(ValueError, match="empty"):
        banklease.Bank.open("swift://c/p", credentials={})
    # Credentials of one kind of store for another: refused, naming both.
    with pytest.raises(banklease.ConfigError, match="S3 credentials were given"):
        banklease.Bank.open(
            "swift://c/p", credentials={"access_key_id": "a", "secret_access_key": "s"}
        )
    with pytest.raises(banklease.ConfigError, match="OpenStack credentials were given"):
        banklease.Bank.open("s3://b/p", credentials={"auth_url": "http://127.0.0.1:1/v3"})


@pytest.mark.skipif(os.environ.get("BANKLEASE_TEST_S3") != "1", reason="needs S3 (moto)")
def test_s3_keys_given_in_code(monkeypatch):
    key = os.environ["AWS_ACCESS_KEY_ID"]
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    # None in the environment: only those given.
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    bucket = os.environ.get("S3_BUCKET", "banklease-test")
    bank = banklease.Bank.open(
        f"s3://{bucket}/py-cred-{uuid.uuid4().hex}",
        credentials={"access_key_id": key, "secret_access_key": secret},
    )
    assert bank.init() == "created"
    banklease.OwnerLease.acquire(bank).release()


@pytest.mark.skipif(
    os.environ.get("BANKLEASE_TEST_RGW") != "1", reason="needs Ceph RGW (checks signatures)"
)
def test_s3_keys_given_in_code_are_the_ones_used(monkeypatch):
    # Competing ones in the environment, a session token and unsigned requests among them:
    # none of them is used beside the keys given.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "WRONG")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "WRONG")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "not-a-session")
    monkeypatch.setenv("AWS_SKIP_SIGNATURE", "true")
    monkeypatch.setenv("AWS_ENDPOINT", os.environ["RGW_S3_ENDPOINT"])
    url = f"s3://{os.environ['RGW_BUCKET']}/py-cred-{uuid.uuid4().hex}"
    right = {
        "access_key_id": os.environ["RGW_ACCESS_KEY_ID"],
        "secret_access_key": os.environ["RGW_SECRET_ACCESS_KEY"],
    }
    assert banklease.Bank.open(url, credentials=right).init() == "created"
    wrong = dict(right, secret_access_key="not-the-secret")
    with pytest.raises(banklease.StoreError, match="refused the credentials"):
        banklease.Bank.open(url, credentials=wrong).init()


def _openrc():
    """The openrc .ci/start-keystone.sh wrote: its OS_* variables."""
    root = os.environ.get("KEYSTONE_ROOT")
    if not root or os.environ.get("BANKLEASE_TEST_KEYSTONE") != "1":
        return None
    found = {}
    with open(os.path.join(root, "openrc")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("export ") and "=" in line:
                name, value = line[len("export ") :].split("=", 1)
                found[name] = value.strip("'\"")
    return found


@pytest.mark.skipif(_openrc() is None, reason="needs Keystone (BANKLEASE_TEST_KEYSTONE=1)")
def test_openstack_options_given_in_code(monkeypatch):
    rc = _openrc()
    for name in list(os.environ):
        if name.startswith("OS_") or name.startswith("ST_"):
            monkeypatch.delenv(name)
    auth = {
        k[len("OS_") :].lower(): v
        for k, v in rc.items()
        if k.startswith("OS_") and k not in ("OS_REGION_NAME", "OS_INTERFACE", "OS_AUTH_TYPE")
    }
    given = {"auth": auth}
    if "OS_REGION_NAME" in rc:
        given["region_name"] = rc["OS_REGION_NAME"]
    with open(os.environ["KEYSTONE_TEST_ENV"]) as f:
        container = json.load(f)["container"]
    bank = banklease.Bank.open(f"swift://{container}/py-cred-{uuid.uuid4().hex}", credentials=given)
    assert bank.init() == "created"
