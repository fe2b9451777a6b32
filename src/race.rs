//! Races of concurrent conditional writers on fresh keys: whether a store's create-if-absent and
//! If-Match are atomic, as far as a probe can show (`banklease doctor`, the lock support check).

use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::Serialize;

use crate::bank::Bank;
use crate::error::{Error, Result};
use crate::paths::Key;

/// The outcome of racing concurrent conditional writers on fresh keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Race {
    /// Rounds run (one fresh key each).
    pub rounds: u32,
    /// Concurrent writers per round.
    pub writers: u32,
    /// Rounds in which more than one writer was told its conditional write succeeded.
    pub rounds_with_several_winners: u32,
    /// The most writers told "succeeded" in one round.
    pub max_winners: u32,
}

impl Race {
    /// True when rounds ran and none had several winners. A store can still be non-atomic and
    /// pass (races are probabilistic); one failing round proves it is not atomic.
    pub fn looked_atomic(&self) -> bool {
        self.rounds > 0 && self.rounds_with_several_winners == 0
    }

    fn new(writers: u32, rounds: u32) -> Self {
        Self {
            rounds,
            writers,
            rounds_with_several_winners: 0,
            max_winners: 0,
        }
    }

    fn record(&mut self, winners: u32) {
        if winners > 1 {
            self.rounds_with_several_winners += 1;
        }
        self.max_winners = self.max_winners.max(winners);
    }
}

/// Racing create-if-absent writers ([`probe_create_race`]).
pub type CreateRace = Race;
/// Racing If-Match writers holding the same ETag ([`probe_update_race`]).
pub type UpdateRace = Race;

/// Race `writers` concurrent If-Match overwrites holding the same current ETag on each of
/// `rounds` fresh keys under `_banklease/race/`, and count the winners (at most one on a store
/// whose If-Match is atomic; s3s-fs let all 16 win). Keys are deleted afterwards.
pub async fn probe_update_race(bank: &Bank, writers: u32, rounds: u32) -> Result<UpdateRace> {
    let mut race = Race::new(writers, rounds);
    for _ in 0..rounds {
        let path = Key::Race(uuid::Uuid::new_v4().to_string()).path(bank);
        let store = bank.store();
        let first = store
            .put(&path, PutPayload::from_static(b"base"))
            .await
            .map_err(|e| Error::store("put", &path, e))?;
        let current = UpdateVersion {
            e_tag: first.e_tag,
            version: first.version,
        };
        let attempts = (0..writers).map(|i| {
            let opts = PutOptions::from(PutMode::Update(current.clone()));
            let path = &path;
            async move {
                store
                    .put_opts(path, PutPayload::from(format!("writer-{i}")), opts)
                    .await
            }
        });
        let results = futures::future::join_all(attempts).await;
        let _ = store.delete(&path).await;
        let mut winners = 0u32;
        for r in results {
            match r {
                Ok(_) => winners += 1,
                Err(object_store::Error::Precondition { .. }) => {}
                Err(e) => return Err(Error::store("put", &path, e)),
            }
        }
        race.record(winners);
    }
    Ok(race)
}

/// Race `writers` concurrent create-if-absent PUTs on each of `rounds` fresh keys under
/// `_banklease/race/`, and count the winners. Keys are deleted afterwards (best effort).
///
/// Swift answered two 201s in about one round in four with 16 writers on one node; moto and
/// local files always had exactly one winner.
pub async fn probe_create_race(bank: &Bank, writers: u32, rounds: u32) -> Result<CreateRace> {
    let mut race = Race::new(writers, rounds);
    for _ in 0..rounds {
        let path = Key::Race(uuid::Uuid::new_v4().to_string()).path(bank);
        let attempts = (0..writers).map(|i| {
            let path = path.clone();
            let store = bank.store().clone();
            async move {
                store
                    .put_opts(
                        &path,
                        PutPayload::from(format!("writer-{i}").into_bytes()),
                        PutOptions::from(PutMode::Create),
                    )
                    .await
            }
        });
        let results = futures::future::join_all(attempts).await;
        let mut winners = 0u32;
        for r in results {
            match r {
                Ok(_) => winners += 1,
                Err(object_store::Error::AlreadyExists { .. }) => {}
                Err(e) => {
                    let _ = bank.store().delete(&path).await;
                    return Err(Error::store("put", &path, e));
                }
            }
        }
        let _ = bank.store().delete(&path).await;
        race.record(winners);
    }
    Ok(race)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn create_races_on_memory_and_files_have_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        for url in [
            "memory://".to_owned(),
            format!("file://{}", dir.path().display()),
        ] {
            let bank = Bank::open(&url).unwrap();
            let race = probe_create_race(&bank, 16, 5).await.unwrap();
            assert!(race.looked_atomic(), "{url}: {race:?}");
            assert_eq!(race.max_winners, 1, "{url}: {race:?}");
        }
    }

    #[tokio::test]
    async fn update_races_on_memory_have_one_winner() {
        let bank = Bank::open("memory://").unwrap();
        let race = probe_update_race(&bank, 16, 5).await.unwrap();
        assert!(race.looked_atomic(), "{race:?}");
    }
}
