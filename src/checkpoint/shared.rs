//! The one way `index.json` is rewritten: on the version that was read.
//!
//! Invariant: **a checkpoint's `index.json` is never overwritten blind.** Several actors write
//! it — its owner finishing a move, a pass repairing that move or collecting, an operator's
//! `checkpoint delete`, the retirement of failed checkpoints, `checkpoint resolve` — and a
//! write decided on a version another actor has since replaced would undo that actor's move
//! (a deletion undone leaves an `available` checkpoint with no data). So every rewrite reads
//! the record with its version, decides from what it read ([`Next`]), and writes only if that
//! version is still the current one (If-Match, or create-if-absent when there was none); on a
//! conflict it reads again and decides again. Creating one is the only other write
//! ([`create_index`]); there is no unconditional overwrite to call.
//!
//! On a store without an enforced If-Match (native Swift) the version is compared by a HEAD
//! just before the write: a write landing between that HEAD and the PUT is the window left
//! there (ARCHITECTURE.md).

use object_store::{ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use crate::bank::Bank;
use crate::checkpoint::record::{parse_record, to_payload, CheckpointRecord};
use crate::error::{Error, Result};
use crate::id::CheckpointId;
use crate::paths::Key;
use crate::store::cause::write_failed;

/// How many times a rewrite reads and decides again after losing to another writer before it
/// gives up (each loss is another actor's move landing; a checkpoint has a handful of actors).
const REWRITE_ATTEMPTS: usize = 8;

/// What a rewrite decides from the record it read.
#[derive(Debug)]
pub enum Next {
    /// Write this record in place of the one read.
    Write(Box<CheckpointRecord>),
    /// Leave the record as it is.
    Leave,
}

/// How a rewrite ended: what is there now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The record in the bank after the rewrite (`None`: there is none).
    pub record: Option<CheckpointRecord>,
    /// Whether this call wrote it.
    pub wrote: bool,
}

/// `index.json` of `id` with the version it was read at.
struct Read {
    record: Option<CheckpointRecord>,
    version: Option<UpdateVersion>,
}

async fn read(bank: &Bank, id: &CheckpointId) -> Result<Read> {
    let path = Key::Index(id.clone()).path(bank);
    let got = match bank.store().get(&path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => {
            return Ok(Read {
                record: None,
                version: None,
            })
        }
        Err(e) => return Err(Error::store("get", &path, e)),
    };
    let version = UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    let size = got.meta.size;
    let body = async { got.bytes().await.map_err(|e| Error::store("get", &path, e)) };
    let record = parse_record(&path, id, size, body).await?;
    Ok(Read {
        record: Some(record),
        version: Some(version),
    })
}

/// Rewrite `checkpoints/<id>/index.json` by `decide`, which is given the record as it is now
/// (`None`: there is none) and says what to write in its place, or to leave it. The write lands
/// only on the version `decide` was given; when another writer's landed first, the record is
/// read again and `decide` asked again. A record that cannot be read is never overwritten (the
/// error is returned). `decide` may be called several times and must decide from its argument
/// alone.
pub async fn rewrite_index(
    bank: &Bank,
    id: &CheckpointId,
    mut decide: impl FnMut(Option<&CheckpointRecord>) -> Result<Next>,
) -> Result<Rewritten> {
    let path = Key::Index(id.clone()).path(bank);
    // Whether the store refused If-Match (native Swift): the version is then compared by a
    // HEAD just before an overwrite.
    let mut no_if_match = bank.refuses_if_match();
    for _ in 0..REWRITE_ATTEMPTS {
        let now = read(bank, id).await?;
        let record = match decide(now.record.as_ref())? {
            Next::Leave => {
                return Ok(Rewritten {
                    record: now.record,
                    wrote: false,
                })
            }
            Next::Write(record) => *record,
        };
        let mode = match now.version {
            None => PutMode::Create,
            Some(version) if !no_if_match => PutMode::Update(version),
            Some(version) => match bank.store().head(&path).await {
                Ok(meta) if meta.e_tag == version.e_tag => PutMode::Overwrite,
                Ok(_) | Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(Error::store("head", &path, e)),
            },
        };
        match bank
            .store()
            .put_opts(&path, to_payload(&record), PutOptions::from(mode))
            .await
        {
            Ok(_) => {
                return Ok(Rewritten {
                    record: Some(record),
                    wrote: true,
                })
            }
            // Another writer's version landed in between (or a retried write of ours did):
            // read it and decide again.
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. }
                | object_store::Error::NotFound { .. },
            ) => continue,
            Err(e) if crate::capability::is_refusal(&e) && !no_if_match => no_if_match = true,
            Err(e) => return Err(write_failed(bank.label(), "put", &path, e)),
        }
    }
    Err(Error::Corrupt {
        path,
        reason: format!(
            "it changed under each of {REWRITE_ATTEMPTS} rewrites in a row (other writers \
             kept moving it); nothing was written by this one, run again"
        ),
    })
}

/// Create `checkpoints/<id>/index.json` as `record` only if none exists (false when one does:
/// the caller reads it to learn whose it is).
pub(crate) async fn create_index(bank: &Bank, record: &CheckpointRecord) -> Result<bool> {
    let index = Key::Index(record.id.clone()).path(bank);
    match bank
        .store()
        .put_opts(
            &index,
            to_payload(record),
            PutOptions::from(PutMode::Create),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
        // A user who may not write gets the operator's line, not one about index.json.
        Err(e) => Err(write_failed(bank.label(), "put", &index, e)),
    }
}
