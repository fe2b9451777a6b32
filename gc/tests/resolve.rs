//! The set-aside and conditional replacement `checkpoint resolve` repairs with, on every
//! backend: the unreadable bytes are kept before anything is written, and a record that changed
//! since it was kept is never replaced — by If-Match where the store enforces it, by a HEAD just
//! before on Swift (which has no If-Match).

use banklease::checkpoint::{self, Decider, Decision, Status};
use banklease::collector::{replace_decision, set_aside};
use banklease::paths::Key;
use banklease::{Error, OwnerId};
use futures::TryStreamExt;
use object_store::ObjectStoreExt;

#[path = "../../tests/common/mod.rs"]
mod common;

#[tokio::test]
async fn an_unreadable_record_is_kept_then_replaced_only_in_the_version_kept() {
    for backend in common::backends() {
        let (bank, _guard) = common::plain_bank(backend).await;
        let id = "cp-torn";
        let path = Key::Decision(id.to_owned()).path(&bank);
        let read = |path: object_store::path::Path| {
            let bank = bank.clone();
            async move {
                let got = bank.store().get(&path).await.unwrap();
                String::from_utf8(got.bytes().await.unwrap().to_vec()).unwrap()
            }
        };
        bank.store().put(&path, "{torn".into()).await.unwrap();
        let decision = Decision {
            format: checkpoint::CHECKPOINT_FORMAT,
            checkpoint_id: id.to_owned(),
            owner_id: OwnerId::random(),
            by: Decider::Owner,
            outcome: Status::Available,
            token: "restored".into(),
            decided_at: chrono::Utc::now(),
            evidence: None,
        };

        let first = set_aside(&bank, Key::Decision(id.to_owned()), id, chrono::Utc::now())
            .await
            .unwrap();
        assert_eq!(read(first.kept_at.clone()).await, "{torn", "{backend:?}");
        // Changed after it was kept (another operator): not replaced.
        bank.store()
            .put(&path, "{torn, differently".into())
            .await
            .unwrap();
        let err = replace_decision(&bank, &first, &decision)
            .await
            .expect_err("a record changed since it was kept is not replaced");
        assert!(
            matches!(&err, Error::Corrupt { reason, .. } if reason.contains("changed since it was read")),
            "{backend:?}: {err}"
        );
        assert_eq!(
            read(path.clone()).await,
            "{torn, differently",
            "{backend:?}"
        );

        // Kept again, in the version now there: replaced.
        let second = set_aside(&bank, Key::Decision(id.to_owned()), id, chrono::Utc::now())
            .await
            .unwrap();
        replace_decision(&bank, &second, &decision).await.unwrap();
        let now = checkpoint::read_decision(&bank, id).await.unwrap().unwrap();
        assert_eq!(
            (now.by, now.outcome, now.token.as_str()),
            (Decider::Owner, Status::Available, "restored"),
            "{backend:?}"
        );
        // Both versions kept, under distinct names.
        let prefix = Key::SetAside("x".into()).path(&bank);
        let prefix =
            object_store::path::Path::from_iter(prefix.parts().take(prefix.parts().count() - 1));
        let kept: Vec<_> = bank
            .store()
            .list(Some(&prefix))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .unwrap();
        assert_eq!(kept.len(), 2, "{backend:?}: {kept:?}");
        assert_eq!(read(second.kept_at.clone()).await, "{torn, differently");
    }
}
