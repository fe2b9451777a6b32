//! Probers on one host share one clock-probe key: a read-back that shows another prober's
//! version is as good as our own only when that prober sent its write on the same boot clock,
//! no earlier than ours.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use banklease::clock::{BootInstant, Clock, SharedClock, Sleep, SystemClock};
use banklease::Bank;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;

/// The system clock, with its boot clock renamed or set back (another boot, time namespace, or
/// a write sent earlier).
#[derive(Debug)]
struct Boot {
    rename: Option<&'static str>,
    back: Duration,
}

impl Clock for Boot {
    fn now(&self) -> Instant {
        SystemClock.now()
    }
    fn system_now(&self) -> SystemTime {
        SystemClock.system_now()
    }
    fn sleep(&self, duration: Duration) -> Sleep {
        SystemClock.sleep(duration)
    }
    fn boot_instant(&self) -> Option<BootInstant> {
        let b = SystemClock.boot_instant()?;
        Some(BootInstant {
            clock: self.rename.map_or(b.clock, str::to_owned),
            since_boot: b.since_boot.checked_sub(self.back)?,
        })
    }
}

/// Before each read-back of the probe key, a rival on the host probes the clock first: every
/// read-back shows the rival's version, never ours.
#[derive(Debug)]
struct Rival {
    key: String,
    bank: Bank,
    clock: SharedClock,
    written: AtomicBool,
}

impl banklease_testkit::port::PortHooks for Rival {
    fn name(&self) -> &str {
        "prober"
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
    fn before(
        &self,
        path: &Path,
    ) -> impl std::future::Future<Output = object_store::Result<u32>> + Send {
        // The first request on the key after each of our writes is its read-back.
        let read_back = path.as_ref() == self.key && self.written.swap(false, Ordering::SeqCst);
        let (bank, clock) = (self.bank.clone(), self.clock.clone());
        async move {
            if read_back {
                let rival = bank.store_time(&clock).await.expect("the rival's probe");
                assert!(rival.verified, "the rival saw its own write");
            }
            Ok(0)
        }
    }
    fn before_put(&self, path: &Path) {
        if path.as_ref() == self.key {
            self.written.store(true, Ordering::SeqCst);
        }
    }
    fn after(&self, _: u32, _: &Path) -> impl std::future::Future<Output = ()> + Send {
        std::future::ready(())
    }
    fn serve<R: Send>(
        &self,
        call: impl std::future::Future<Output = R> + Send,
    ) -> impl std::future::Future<Output = R> + Send {
        call
    }
    fn note(&self, _: &str, _: &Path, _: Duration, _: &dyn std::fmt::Display) {}
    fn gone(&self, why: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "test",
            source: why.to_owned().into(),
        }
    }
}

/// Our reading when a rival with `rival_clock` overwrites the key before each of our read-backs.
async fn reading_beside(rival_clock: Boot) -> banklease::clock::StoreTime {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let rival = banklease_testkit::made(Bank::from_store(inner.clone(), "bank", "m"));
    let hooks = Rival {
        key: rival.own_clock_probe().as_ref().to_owned(),
        bank: rival,
        clock: Arc::new(rival_clock),
        written: AtomicBool::new(false),
    };
    let port = banklease_testkit::port::Port::new(inner, Arc::new(hooks));
    let bank = Bank::from_store(Arc::new(port), "bank", "m");
    let clock: SharedClock = Arc::new(SystemClock);
    bank.store_time(&clock).await.expect("our probe")
}

/// Two collectors (or a collector and a cron job's one-shot pass) on one host, on a store whose
/// replicas lag, kept overwriting each other's probe between write and read-back: every
/// attempt showed the other's version, every reading was unverified, and both judged nothing
/// (the simulation's Collectors seed 1,003,868 left three zombies). The rival's write was sent
/// after ours on the same boot clock: its stamp bounds the store's time as ours would.
#[tokio::test]
async fn a_version_another_prober_on_this_boot_sent_after_ours_verifies_the_reading() {
    if SystemClock.boot_instant().is_none() {
        return; // No boot clock here (not Linux, or an unnamed time namespace).
    }
    let reading = reading_beside(Boot {
        rename: None,
        back: Duration::ZERO,
    })
    .await;
    assert!(reading.verified, "{reading:?}");
}

/// A version sent before ours (a lagging replica's, or a prober's whose write overtook ours)
/// may predate a step: never taken.
#[tokio::test]
async fn a_version_sent_before_ours_leaves_the_reading_unverified() {
    if SystemClock.boot_instant().is_none() {
        return;
    }
    let reading = reading_beside(Boot {
        rename: None,
        back: Duration::from_secs(60),
    })
    .await;
    assert!(!reading.verified, "{reading:?}");
}

/// Boot clocks of another boot or time namespace do not compare: never taken.
#[tokio::test]
async fn a_version_from_another_boot_clock_leaves_the_reading_unverified() {
    if SystemClock.boot_instant().is_none() {
        return;
    }
    let reading = reading_beside(Boot {
        rename: Some("another-boot-b0.000000000"),
        back: Duration::ZERO,
    })
    .await;
    assert!(!reading.verified, "{reading:?}");
}
