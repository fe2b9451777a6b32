//! Owner leases on a Swift bank authenticated through a real Keystone v3 (`.ci/start-keystone.sh`):
//! every way an openrc names the user and the project, application credentials, token expiry
//! mid-lease (tokens of 20 s from the second Keystone), a revoked token and a user disabled
//! mid-lease. Needs `BANKLEASE_TEST_KEYSTONE=1` (`.ci/run`).
#![allow(clippy::disallowed_methods)] // real token lifetimes on real time

use std::sync::Arc;
use std::time::{Duration, Instant};

use banklease::clock::{Clock, SystemClock};
use banklease::store::SwiftStore;
use banklease::{Bank, LeaseState, LeaseWindows, OwnerId, OwnerLease};
use banklease_testkit::keystone::{KeystoneEnv, TokenRecorder, Vars};

fn windows() -> LeaseWindows {
    LeaseWindows::new(
        Duration::from_millis(500),
        Duration::from_secs(4),
        Duration::from_millis(200),
    )
    .unwrap()
}

/// A fresh bank (unique prefix) on `store`.
async fn bank_on(ks: &KeystoneEnv, store: &SwiftStore) -> Bank {
    let prefix = format!("ks-{}", uuid::Uuid::new_v4().simple());
    let bank = Bank::from_swift(
        store.clone(),
        &prefix,
        &format!("swift://{}/{prefix}", ks.container()),
    );
    banklease::layout::init(&bank).await.unwrap();
    bank
}

fn with(mut vars: Vars, set: &[(&str, &str)], remove: &[&str]) -> Vars {
    vars.retain(|(k, _)| !remove.contains(&k.as_str()) && !set.iter().any(|(s, _)| s == k));
    vars.extend(set.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    vars
}

#[tokio::test]
async fn every_way_an_openrc_names_the_user_and_project_holds_a_lease() {
    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let names = ks.password_vars();
    let cases: Vec<(&str, Vars)> = vec![
        ("user and project by name, default domain", names.clone()),
        (
            "user and project by id",
            with(
                names.clone(),
                &[
                    ("OS_USER_ID", &ks.get("tester.user_id")),
                    ("OS_PROJECT_ID", &ks.get("tester.project_id")),
                ],
                &[
                    "OS_USERNAME",
                    "OS_USER_DOMAIN_NAME",
                    "OS_PROJECT_NAME",
                    "OS_PROJECT_DOMAIN_NAME",
                ],
            ),
        ),
        (
            "another domain, by name",
            with(
                names.clone(),
                &[
                    ("OS_USERNAME", &ks.get("ops.username")),
                    ("OS_PASSWORD", &ks.get("ops.password")),
                    ("OS_USER_DOMAIN_NAME", &ks.get("ops.domain_name")),
                    ("OS_PROJECT_NAME", &ks.get("ops.project_name")),
                    ("OS_PROJECT_DOMAIN_NAME", &ks.get("ops.domain_name")),
                ],
                &[],
            ),
        ),
        (
            "another domain, by id",
            with(
                names.clone(),
                &[
                    ("OS_USERNAME", &ks.get("ops.username")),
                    ("OS_PASSWORD", &ks.get("ops.password")),
                    ("OS_USER_DOMAIN_ID", &ks.get("ops.domain_id")),
                    ("OS_PROJECT_NAME", &ks.get("ops.project_name")),
                    ("OS_PROJECT_DOMAIN_ID", &ks.get("ops.domain_id")),
                ],
                &["OS_USER_DOMAIN_NAME", "OS_PROJECT_DOMAIN_NAME"],
            ),
        ),
        ("application credential by id", ks.app_cred_vars()),
        (
            "application credential by name, with its user",
            with(
                ks.app_cred_vars(),
                &[
                    ("OS_APPLICATION_CREDENTIAL_NAME", &ks.get("app_cred.name")),
                    ("OS_USERNAME", &ks.get("tester.username")),
                    ("OS_USER_DOMAIN_NAME", "Default"),
                ],
                &["OS_APPLICATION_CREDENTIAL_ID"],
            ),
        ),
        (
            "the internal endpoint",
            with(names.clone(), &[("OS_INTERFACE", "internal")], &[]),
        ),
    ];
    for (what, vars) in cases {
        let store = ks.store(&vars, None);
        let bank = bank_on(&ks, &store).await;
        let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows(), Arc::new(SystemClock))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        lease
            .renew()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(lease.check_validity(), "{what}");
        lease.release().await.unwrap();
        assert_eq!(
            store.authentications(),
            1,
            "{what}: one token for all of it"
        );
    }
}

/// Renew every `every` for `run`; each renewal must succeed, count from a send between the
/// call and the return, and leave the owner Held.
async fn renew_for(lease: &OwnerLease, run: Duration, every: Duration) {
    let expire = lease.windows().expire_window;
    let started = Instant::now();
    while started.elapsed() < run {
        let called = Instant::now();
        let valid_until = lease.renew().await.expect("a renewal through Keystone");
        let returned = Instant::now();
        // One attempt's send time: never before the call, never after the answer.
        assert!(
            valid_until >= called + expire && valid_until <= returned + expire,
            "valid_until {:?} after the call, expire {expire:?}",
            valid_until - called
        );
        assert!(
            matches!(lease.state(), LeaseState::Held { .. }),
            "{:?}",
            lease.state()
        );
        tokio::time::sleep(every).await;
    }
}

#[tokio::test]
async fn an_owner_renews_through_token_expiries_and_stays_held() {
    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let store = ks.store(&ks.password_vars_at(&ks.short_auth_url()), None);
    let bank = bank_on(&ks, &store).await;
    let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows(), Arc::new(SystemClock))
        .await
        .unwrap();
    let run = 3 * ks.short_token_lifetime() + Duration::from_secs(2);
    renew_for(&lease, run, Duration::from_millis(500)).await;
    // A new token about every three quarters of a lifetime: through three expiries, not per
    // request (a fixed 30 s margin renewed a 20 s token before every request).
    let auths = store.authentications();
    // One more than the arithmetic gives: a 401 on a token Swift's cache has just dropped.
    let most = run.as_secs() / (ks.short_token_lifetime().as_secs() * 3 / 4) + 3;
    assert!(
        (4..=most).contains(&auths),
        "{auths} authentications over {run:?}"
    );
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_revoked_token_is_replaced_once_and_the_owner_stays_held() {
    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let recorder = TokenRecorder::default();
    let store = ks.store(&ks.password_vars(), Some(recorder.clone()));
    let bank = bank_on(&ks, &store).await;
    let admin = ks.admin().await;
    let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows(), Arc::new(SystemClock))
        .await
        .unwrap();
    assert_eq!(store.authentications(), 1);
    let token = recorder.tokens().pop().expect("the owner's token");
    admin.revoke(&token).await;
    assert!(!admin.validates(&token).await, "Keystone revoked it");
    // Swift's authtoken caches a validation for 2 s: within a few renewals Swift answers 401,
    // the client authenticates once more, and the renewal goes through.
    renew_for(&lease, Duration::from_secs(6), Duration::from_millis(300)).await;
    assert_eq!(store.authentications(), 2, "re-authenticated exactly once");
    assert_eq!(recorder.tokens().len(), 2);
    lease.release().await.unwrap();
}

#[tokio::test]
async fn a_user_disabled_mid_lease_loses_it_on_its_own_clock_never_later() {
    let Some(ks) = KeystoneEnv::load() else {
        return;
    };
    let admin = ks.admin().await;
    let name = format!(
        "disable-me-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let password = "disable-me-secret-9f3";
    let user_id = admin
        .create_member(&name, password, &ks.get("tester.project_id"))
        .await;
    let vars = with(
        ks.password_vars(),
        &[("OS_USERNAME", &name), ("OS_PASSWORD", password)],
        &[],
    );
    let store = ks.store(&vars, None);
    let bank = bank_on(&ks, &store).await;
    let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows(), Arc::new(SystemClock))
        .await
        .unwrap();
    let mut deadline = lease.renew().await.unwrap();
    admin.set_enabled(&user_id, false).await;

    // Renew until refused: a renewal may still pass while Swift's cache holds the token.
    let mut refusal = None;
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        match lease.renew().await {
            Ok(valid_until) => deadline = valid_until,
            Err(e) => {
                if refusal.is_none() {
                    refusal = Some(e.to_string());
                }
                if !lease.check_validity() {
                    break;
                }
            }
        }
        // Never believed valid past the send of its last successful renewal + expire window
        // (`deadline`, on the lease's own clock): a failed renewal extends nothing.
        let now = SystemClock.now();
        assert!(now + lease.remaining() <= deadline, "{:?}", lease.state());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let refusal = refusal.expect("renewals fail once the user is disabled");
    assert!(!refusal.contains('\n'), "one line: {refusal}");
    assert!(
        refusal.contains(&format!("user=`{name}`")) && refusal.contains("401"),
        "names who was refused and how: {refusal}"
    );
    assert!(!refusal.contains(password), "{refusal}");
    // Lost on its own clock, no later than its last good renewal's send + expire window.
    tokio::time::sleep(deadline.saturating_duration_since(Instant::now())).await;
    assert!(!lease.check_validity());
    assert!(
        matches!(lease.state(), LeaseState::Lost { .. }),
        "{:?}",
        lease.state()
    );
    admin.delete_user(&user_id).await;
}
