//! `gc/clock-steps`: the forward steps of the store's clock that collectors confirmed, each with
//! its size, kept as long as a retention may still span it.
//!
//! Invariant: **a confirmed step does not shorten a retention.** `gc.keep_failed_for` is
//! measured on the store's clock, from an entry's stamp; a step forward of that clock after the
//! stamp would make the entry look older by the step. [`not_counting`] takes out every recorded
//! step that came after the stamp. A step whose size is overstated only keeps a failed
//! checkpoint longer. A step no pass confirmed (a reading that was wrong once) is not here and
//! changes nothing.

use std::time::Duration;

use banklease::clock::StoreTime;
use banklease::paths::Key;
use banklease::Bank;
use chrono::{DateTime, Utc};
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

/// One confirmed step forward: the stamp of the reading that showed it, and by how much.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockStep {
    /// The reading that showed the step (the store's clock after it).
    pub at: DateTime<Utc>,
    /// How far the clock stepped, in milliseconds.
    pub by_ms: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StepsRecord {
    steps: Vec<ClockStep>,
}

/// Attempts of a conditional write that other collectors keep beating.
const WRITE_ATTEMPTS: usize = 5;

/// The steps recorded in `bank` (none when there is no record). An unreadable record is an
/// error: a retention judged without it could end early.
pub async fn read_steps(bank: &Bank) -> banklease::Result<Vec<ClockStep>> {
    Ok(read_versioned(bank)
        .await?
        .map(|(r, _)| r.steps)
        .unwrap_or_default())
}

async fn read_versioned(bank: &Bank) -> banklease::Result<Option<(StepsRecord, UpdateVersion)>> {
    let path = Key::GcClockSteps.path(bank);
    let got = match bank.store().get(&path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(banklease::Error::store("get", &path, e)),
    };
    let version = UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    let bytes = got
        .bytes()
        .await
        .map_err(|e| banklease::Error::store("get", &path, e))?;
    let record = serde_json::from_slice(&bytes).map_err(|e| banklease::Error::Corrupt {
        path: path.clone(),
        reason: format!("not a clock-steps record: {e}"),
    })?;
    Ok(Some((record, version)))
}

/// Add `step` to the bank's record (once: a step already there is kept as it is), dropping the
/// steps that no retention of `keep` can span any more at store time `now`. Written on the
/// version read; where If-Match is refused (Swift), overwritten after a HEAD still shows it.
pub async fn record_step(
    bank: &Bank,
    step: ClockStep,
    keep: Duration,
    now: DateTime<Utc>,
) -> banklease::Result<()> {
    let path = Key::GcClockSteps.path(bank);
    for _ in 0..WRITE_ATTEMPTS {
        let read = read_versioned(bank).await?;
        let (mut record, version) = match read {
            Some((r, v)) => (r, Some(v)),
            None => (StepsRecord::default(), None),
        };
        if record.steps.iter().any(|s| s.at == step.at) {
            return Ok(());
        }
        // A step no running retention spans any more changes nothing: an entry stamped before
        // it is due even with it (and every later step) taken out.
        let all = record.steps.clone();
        record.steps.retain(|s| {
            let just_before = s.at - chrono::TimeDelta::milliseconds(1);
            not_counting(&all, just_before, now) <= keep
        });
        record.steps.push(step);
        record.steps.sort_by_key(|s| s.at);
        let body = PutPayload::from(serde_json::to_vec(&record).expect("a steps record"));
        let mode = match &version {
            Some(v) => PutMode::Update(v.clone()),
            None => PutMode::Create,
        };
        match bank
            .store()
            .put_opts(&path, body.clone(), PutOptions::from(mode))
            .await
        {
            Ok(_) => return Ok(()),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => continue,
            Err(e) if banklease::store::is_refusal(&e) => {
                let Some(version) = version else {
                    return Err(banklease::Error::store("put", &path, e));
                };
                match bank.store().head(&path).await {
                    Ok(meta) if meta.e_tag == version.e_tag => {
                        return bank
                            .store()
                            .put(&path, body)
                            .await
                            .map(drop)
                            .map_err(|e| banklease::Error::store("put", &path, e));
                    }
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => continue,
                    Err(e) => return Err(banklease::Error::store("head", &path, e)),
                }
            }
            Err(e) => return Err(banklease::Error::store("put", &path, e)),
        }
    }
    Err(banklease::Error::store(
        "put",
        &path,
        object_store::Error::Generic {
            store: "gc",
            source: format!(
                "other collectors replaced the clock-steps record {WRITE_ATTEMPTS} times while \
                 this one wrote; the next pass that confirms a step tries again"
            )
            .into(),
        },
    ))
}

/// How long ago `stamp` was at store time `now`, not counting the recorded steps that came
/// after it.
pub fn not_counting(steps: &[ClockStep], stamp: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    let stepped: Duration = steps
        .iter()
        .filter(|s| s.at > stamp)
        .map(|s| Duration::from_millis(s.by_ms))
        .sum();
    StoreTime::between(stamp, now).saturating_sub(stepped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn only_steps_after_the_stamp_are_taken_out() {
        let steps = [
            ClockStep {
                at: t(100),
                by_ms: 30_000,
            },
            ClockStep {
                at: t(500),
                by_ms: 3_600_000,
            },
        ];
        // Stamped before both: both taken out (saturating at zero).
        assert_eq!(not_counting(&steps, t(0), t(3_000)), Duration::ZERO);
        assert_eq!(
            not_counting(&steps, t(0), t(4_000)),
            Duration::from_secs(4_000 - 30 - 3_600)
        );
        assert_eq!(
            not_counting(&steps, t(0), t(10_000)),
            Duration::from_secs(10_000 - 30 - 3_600)
        );
        // Stamped between them: only the later one.
        assert_eq!(
            not_counting(&steps, t(200), t(10_000)),
            Duration::from_secs(9_800 - 3_600)
        );
        // Stamped after both: as measured.
        assert_eq!(
            not_counting(&steps, t(600), t(10_000)),
            Duration::from_secs(9_400)
        );
    }

    #[tokio::test]
    async fn a_step_is_recorded_once_and_old_ones_are_dropped() {
        let bank = Bank::open("memory://").unwrap();
        banklease::layout::init(&bank).await.unwrap();
        let keep = Duration::from_secs(3_600);
        let first = ClockStep {
            at: t(0),
            by_ms: 60_000,
        };
        record_step(&bank, first, keep, t(10)).await.unwrap();
        record_step(&bank, first, keep, t(20)).await.unwrap();
        assert_eq!(read_steps(&bank).await.unwrap(), vec![first]);
        // Within a retention and the step of it, the first may still span an entry.
        let second = ClockStep {
            at: t(3_600 + 30),
            by_ms: 1_000,
        };
        record_step(&bank, second, keep, t(3_600 + 30))
            .await
            .unwrap();
        assert_eq!(read_steps(&bank).await.unwrap(), vec![first, second]);
        // Past it (3,600 s + the two steps' 61 s), no entry stamped before it is still kept.
        let third = ClockStep {
            at: t(3_600 + 62),
            by_ms: 1_000,
        };
        record_step(&bank, third, keep, t(3_600 + 62))
            .await
            .unwrap();
        assert_eq!(read_steps(&bank).await.unwrap(), vec![second, third]);
    }
}
