//! `Checkpoint::upload_data`: a data object in parts, each sent only while the lease is valid.

use banklease_testkit::cid;
use std::sync::Arc;
use std::time::Duration;

use banklease::clock::MockClock;
use banklease::{Bank, Checkpoint, Error, LeaseWindows, OwnerId, OwnerLease};
use object_store::{ObjectStoreExt, PutPayload};

const MIB: usize = 1 << 20;

async fn owner() -> (Bank, Arc<MockClock>, Checkpoint) {
    let bank = Bank::open("memory:///b").unwrap();
    let clock = Arc::new(MockClock::new());
    let windows = LeaseWindows::new(
        Duration::from_secs(1),
        Duration::from_secs(5),
        Duration::from_secs(1),
    )
    .unwrap();
    let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, clock.clone())
        .await
        .unwrap();
    let cp = Checkpoint::create(&lease, &cid("cp-1")).await.unwrap();
    (bank, clock, cp)
}

#[tokio::test]
async fn parts_make_one_object_only_once_completed() {
    let (bank, _clock, cp) = owner().await;
    let mut upload = cp.upload_data("big").await.unwrap();
    for byte in [1u8, 2, 3] {
        upload
            .put_part(PutPayload::from(vec![byte; 5 * MIB]))
            .await
            .unwrap();
    }
    let path = upload.path().clone();
    assert!(
        bank.store().head(&path).await.is_err(),
        "invisible before complete"
    );
    assert_eq!(upload.complete().await.unwrap(), (15 * MIB) as u64);
    let bytes = bank
        .store()
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(bytes.len(), 15 * MIB);
    assert_eq!((bytes[0], bytes[5 * MIB], bytes[15 * MIB - 1]), (1, 2, 3));
}

#[tokio::test]
async fn once_validity_ends_no_part_is_sent_and_the_upload_leaves_nothing() {
    let (bank, clock, cp) = owner().await;
    let mut upload = cp.upload_data("big").await.unwrap();
    upload
        .put_part(PutPayload::from(vec![7u8; 5 * MIB]))
        .await
        .unwrap();
    // Less than the validity window left: the next part is refused, with no request.
    clock.advance(Duration::from_millis(4500));
    let err = upload
        .put_part(PutPayload::from(vec![8u8; 5 * MIB]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ValidityTooShort { .. }), "{err}");
    assert_eq!(upload.parts(), 1);
    let path = upload.path().clone();
    // The completion is refused too, and aborts the upload: no object, no parts.
    let err = upload.complete().await.unwrap_err();
    assert!(matches!(err, Error::ValidityTooShort { .. }), "{err}");
    assert!(bank.store().head(&path).await.is_err());
    // A new upload cannot even start.
    let err = cp.upload_data("other").await.unwrap_err();
    assert!(matches!(err, Error::ValidityTooShort { .. }), "{err}");
}
