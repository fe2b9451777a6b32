//! Reading and writing the record of what the probes learnt about a bank's store
//! (`_banklease/store.json`; its type and invariant: `learnt.rs`).

use object_store::{ObjectStoreExt, PutPayload};

use crate::bank::Bank;
use crate::capability::{Capabilities, Condition};
use crate::error::{Error, Result};
use crate::learnt::{Learnt, FORMAT};
use crate::paths::Key;

/// The record of `bank`'s store, if there is one this release can use there.
pub(crate) async fn read(bank: &Bank) -> Result<Option<Learnt>> {
    let path = Key::Learnt.path(bank);
    let bytes = match bank.store().get(&path).await {
        Ok(r) => r.bytes().await.map_err(|e| Error::store("get", &path, e))?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(Error::store("get", &path, e)),
    };
    let learnt: Learnt = match serde_json::from_slice(&bytes) {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(path = %path, error = %e, "the store's learnt record is unreadable; measuring again");
            return Ok(None);
        }
    };
    if learnt.format != FORMAT || learnt.store != bank.identity() {
        tracing::debug!(path = %path, store = %learnt.store, "the learnt record is another store's or format's; measuring again");
        return Ok(None);
    }
    Ok(Some(learnt))
}

/// Keep `learnt` in the bank, best effort: a handle that only reads, or a credential that may
/// not write, measures again next time, which costs requests, not correctness.
pub(crate) async fn write(bank: &Bank, learnt: &Learnt) {
    if bank.is_reading_only() {
        return;
    }
    let path = Key::Learnt.path(bank);
    let body = serde_json::to_vec_pretty(learnt).expect("a learnt record serialises");
    if let Err(e) = bank.store().put(&path, PutPayload::from(body)).await {
        tracing::debug!(path = %path, error = %e, "cannot keep what the probe learnt");
    }
}

/// Read the record afresh, change what `update` measured, and write it on the version read
/// (create-if-absent when there is none; a record of another store, or unreadable, is
/// replaced by one holding `measured`, the conditions this handle measured). Nothing is
/// written when nothing changed. `None` when the write lost a race or failed: what was
/// measured is measured again later.
pub(crate) async fn update(
    bank: &Bank,
    measured: &Capabilities,
    update: impl FnOnce(&mut Learnt),
) -> Option<Learnt> {
    use object_store::{PutMode, PutOptions, UpdateVersion};
    let path = Key::Learnt.path(bank);
    let fresh = || async { Some(Learnt::new(bank.identity(), measured.clone())) };
    let (mut learnt, mode) = match bank.store().get(&path).await {
        Ok(got) => {
            // On a store that does not keep If-Match (Swift) the record is overwritten: a
            // race lost there costs a measurement later, as any lost race here.
            let version = if measured.conditional_overwrite == Condition::Enforced {
                PutMode::Update(UpdateVersion {
                    e_tag: got.meta.e_tag.clone(),
                    version: got.meta.version.clone(),
                })
            } else {
                PutMode::Overwrite
            };
            let bytes = got.bytes().await.ok()?;
            match serde_json::from_slice::<Learnt>(&bytes) {
                Ok(l) if l.format == FORMAT && l.store == bank.identity() => (l, version),
                _ => (fresh().await?, version),
            }
        }
        Err(object_store::Error::NotFound { .. }) => (fresh().await?, PutMode::Create),
        Err(e) => {
            tracing::debug!(path = %path, error = %e, "cannot read the learnt record to update it");
            return None;
        }
    };
    let before = learnt.clone();
    update(&mut learnt);
    if learnt == before && !matches!(mode, PutMode::Create) {
        return Some(learnt);
    }
    let body = serde_json::to_vec_pretty(&learnt).expect("a learnt record serialises");
    match bank
        .store()
        .put_opts(&path, PutPayload::from(body), PutOptions::from(mode))
        .await
    {
        Ok(_) => Some(learnt),
        Err(e) => {
            tracing::debug!(path = %path, error = %e, "what was measured is not kept this time");
            None
        }
    }
}

/// Forget the record: the store behaved against it (a condition it was said to keep was
/// refused). Best effort, as [`write`].
pub(crate) async fn forget(bank: &Bank) {
    if bank.is_reading_only() || !bank.keeps_learnt() {
        return;
    }
    bank.forget_remembered();
    let path = Key::Learnt.path(bank);
    // The refused write's own error says what failed; this is bookkeeping.
    tracing::info!(
        bank = bank.label(),
        "the store refused a condition: what was learnt of it is forgotten, and measured again"
    );
    if let Err(e) = bank.store().delete(&path).await {
        tracing::debug!(path = %path, error = %e, "cannot remove the learnt record");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;
    use object_store::ObjectStore;

    use super::*;
    use crate::learnt::Verdict;
    use crate::store::CountingStore;
    use chrono::DateTime;

    /// Two processes' handles on one store: the first measures whether named locks can be
    /// kept (over a hundred racing writes) and keeps the verdict; the second reads it back
    /// with one GET and writes nothing. Its conditions it measures itself, as every handle.
    #[tokio::test]
    async fn a_second_process_takes_the_kept_lock_verdict_and_writes_nothing() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let first = Bank::from_store(Arc::clone(&store), "b", "s3://b/p")
            .keeping_learnt("s3://b/p endpoint=e".into());
        crate::lock::support::measure(&first).await.unwrap();
        let counting = Arc::new(CountingStore::new(Arc::clone(&store)));
        let second = Bank::from_store(counting.clone(), "b", "s3://b/p")
            .keeping_learnt("s3://b/p endpoint=e".into());
        crate::lock::support::ensure_supported(&second)
            .await
            .unwrap();
        let counts = counting.counters().snapshot();
        assert_eq!(counts.get("get"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("put"), None, "{counts:?}");
    }

    /// An owner's renewal that the store refuses (it no longer keeps If-Match) makes the bank
    /// forget what it learnt, as a lock write does: the next lock command measures again.
    #[tokio::test]
    async fn a_renewal_the_store_refuses_forgets_what_was_learnt() {
        use banklease_testkit::failing::FailingStore;
        let failing = FailingStore::new(InMemory::new());
        let store: Arc<dyn ObjectStore> = Arc::new(failing.clone());
        let bank = Bank::from_store(Arc::clone(&store), "b", "s3://b/p")
            .keeping_learnt("s3://b/p endpoint=e".into());
        crate::layout::init(&bank).await.unwrap();
        crate::lock::support::measure(&bank).await.unwrap();
        let record = Key::Learnt.path(&bank);
        assert!(store.head(&record).await.is_ok(), "the verdict is kept");
        let lease = crate::OwnerLease::acquire(
            &bank,
            crate::OwnerId::random(),
            crate::LeaseWindows::default(),
            Arc::new(crate::clock::SystemClock),
        )
        .await
        .unwrap();
        failing.set_refuse_updates(true);
        lease.renew().await.unwrap_err();
        assert!(
            store.head(&record).await.is_err(),
            "the record of a store that refused a condition is forgotten"
        );
    }

    /// One store, however its URL is spelt, has one identity; another endpoint or bucket is
    /// another store.
    #[test]
    fn spellings_of_one_store_share_its_identity() {
        let identity = |url: &str| Bank::open(url).unwrap().identity().to_owned();
        let one = identity("s3://b/p");
        for same in ["s3://b/p/", "s3://b//p", " s3://b/p "] {
            assert_eq!(identity(same), one, "{same}");
        }
        assert_ne!(identity("s3://b/q"), one);
        assert_ne!(identity("s3://c/p"), one);
        assert!(one.contains(" endpoint="), "{one}");
    }

    /// A record the bank was copied with from another store (another endpoint), or one this
    /// release cannot read, is not used: named locks are measured again, and the verdict kept
    /// under the new store's name.
    #[tokio::test]
    async fn another_stores_or_an_unreadable_record_is_measured_again() {
        for body in [None, Some(b"{not json".to_vec())] {
            let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
            let old = Bank::from_store(Arc::clone(&store), "b", "s3://b/p")
                .keeping_learnt("s3://b/p endpoint=old".into());
            crate::lock::support::measure(&old).await.unwrap();
            if let Some(body) = &body {
                store
                    .put(&Key::Learnt.path(&old), PutPayload::from(body.clone()))
                    .await
                    .unwrap();
            }
            let counting = Arc::new(CountingStore::new(Arc::clone(&store)));
            let new = Bank::from_store(counting.clone(), "b", "s3://b/p")
                .keeping_learnt("s3://b/p endpoint=new".into());
            crate::lock::support::ensure_supported(&new).await.unwrap();
            let counts = counting.counters().snapshot();
            // The races: dozens of writes.
            assert!(counts.get("put").copied().unwrap_or(0) > 20, "{counts:?}");
            let kept = read(&new)
                .await
                .unwrap()
                .expect("a record of the new store");
            assert_eq!(kept.store, "s3://b/p endpoint=new");
            assert_eq!(kept.locks, Some(Verdict::Supported));
        }
    }

    /// Ceph RGW honours only unquoted ETags in `If-Match`: a lock command that takes the kept
    /// verdict instead of measuring sends them unquoted from its first write, as the probe
    /// would have set it. (Before, such a handle sent quoted ones, which RGW refused: the
    /// end-to-end scenario on RGW failed.)
    #[tokio::test]
    async fn a_kept_record_of_unquoted_etags_has_conditions_sent_unquoted() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let first = Bank::from_s3_compatible(Arc::clone(&store), "b", "s3://b/p")
            .keeping_learnt("s3://b/p endpoint=rgw".into());
        let mut caps = first.capabilities().await.unwrap().clone();
        caps.unquoted_etags = true;
        let mut learnt = Learnt::new(first.identity(), caps);
        learnt.locks = Some(Verdict::Supported);
        write(&first, &learnt).await;
        let second = Bank::from_s3_compatible(Arc::clone(&store), "b", "s3://b/p")
            .keeping_learnt("s3://b/p endpoint=rgw".into());
        assert!(!second.sends_unquoted());
        crate::lock::support::ensure_supported(&second)
            .await
            .unwrap();
        assert!(second.sends_unquoted());
    }

    /// What `init` measured is never overwritten with an older handle's view: a handle keeping
    /// one more thing changes that field alone, on the version it read.
    #[tokio::test]
    async fn keeping_one_thing_changes_that_field_alone() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let old = Bank::from_store(Arc::clone(&store), "b", "s3://b/p")
            .keeping_learnt("s3://b/p endpoint=e".into());
        old.capabilities().await.unwrap();
        // `init` elsewhere, meanwhile: the conditions measured again, and found refused.
        let init = Bank::from_store(Arc::clone(&store), "b", "s3://b/p")
            .keeping_learnt("s3://b/p endpoint=e".into());
        let mut caps = init.capabilities().await.unwrap().clone();
        caps.conditional_overwrite = crate::capability::Condition::Refused;
        let mut measured = Learnt::new(init.identity(), caps.clone());
        measured.locks = Some(Verdict::Refused("If-Match is refused".into()));
        write(&init, &measured).await;
        // The old handle keeps a stamp resolution it measured.
        old.learn(|l| l.stamp_resolution_ms = Some(1000)).await;
        let kept = read(&old).await.unwrap().unwrap();
        assert_eq!(kept.capabilities, caps);
        assert_eq!(kept.locks, measured.locks);
        assert_eq!(kept.stamp_resolution_ms, Some(1000));
    }

    /// A reader keeps nothing, and never measures the store to have something to keep (the
    /// capability probe writes). Before, Python's `check_lease_existence` on a bank without a
    /// record wrote 5 times on S3 this way.
    #[tokio::test]
    async fn a_reader_learns_nothing_and_writes_nothing() {
        let counting = Arc::new(CountingStore::new(InMemory::new()));
        let reader = Bank::from_store(counting.clone(), "b", "s3://b/p")
            .keeping_learnt("s3://b/p endpoint=e".into())
            .reading_only();
        reader.learn(|l| l.stamp_resolution_ms = Some(1000)).await;
        let counts = counting.counters().snapshot();
        assert_eq!(counts.get("put"), None, "{counts:?}");
        assert_eq!(counts.get("delete"), None, "{counts:?}");
    }

    /// A refusal read back says when and by whom it was measured, and how to measure again.
    #[test]
    fn a_kept_refusal_names_its_measurement() {
        let learnt = Learnt {
            format: FORMAT,
            store: "s".into(),
            capabilities: Capabilities {
                create_if_absent: crate::capability::Condition::Enforced,
                conditional_overwrite: crate::capability::Condition::Refused,
                renewal: crate::capability::RenewalMechanism::VerifyThenOverwrite,
                server_side_expiry: false,
                unquoted_etags: false,
            },
            locks: Some(Verdict::Refused("If-Match is refused".into())),
            fencing: None,
            stamp_resolution_ms: None,
            date_agrees: None,
            learnt_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            learnt_by: "banklease 0.1.0 on host h (pid 7, banklease)".into(),
        };
        let Verdict::Refused(why) = learnt.locks.as_ref().unwrap().as_kept(&learnt) else {
            panic!("still a refusal");
        };
        assert_eq!(
            why,
            "If-Match is refused (measured at 2027-01-15T08:00:00Z by banklease 0.1.0 on host h \
             (pid 7, banklease); `banklease init` measures the store again)"
        );
    }
}
