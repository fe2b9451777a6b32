//! An owner's validity must count time its host spent suspended: `CLOCK_MONOTONIC` stops while
//! the host sleeps, but the store's clock and every observer's go on, so a lease timed on it
//! would look valid to its owner long after observers saw it expire.
//!
//! Its own test binary: a simulated suspend moves every `SystemClock` in the process.

use std::sync::Arc;
use std::time::Duration;

use banklease::clock::{simulate_suspend, SystemClock};
use banklease::{Bank, LeaseState, LeaseWindows, OwnerId, OwnerLease};

#[tokio::test]
async fn validity_counts_time_the_host_spent_suspended() {
    let bank = Bank::open("memory://").unwrap();
    let windows = LeaseWindows::new(
        Duration::from_secs(10),
        Duration::from_secs(30),
        Duration::from_secs(5),
    )
    .unwrap();
    let lease = OwnerLease::acquire(&bank, OwnerId::random(), windows, Arc::new(SystemClock))
        .await
        .unwrap();
    assert!(lease.check_validity());
    // Suspended for a minute: CLOCK_MONOTONIC (and tokio's clock) stood still, the store's
    // clock and every observer's did not.
    simulate_suspend(Duration::from_secs(60));
    assert!(
        !lease.check_validity(),
        "after a 60 s suspend a 30 s lease has run out"
    );
    assert_eq!(lease.remaining(), Duration::ZERO);
    assert!(matches!(lease.state(), LeaseState::Lost { .. }));
    assert!(
        lease.renew().await.is_err(),
        "a lost lease is never renewed"
    );
}
