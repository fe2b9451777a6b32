//! `banklease checkpoint delete ID…`: an operator deletes checkpoints by id (or unique prefix).
//! Exit 0 when each was deleted (or already was), 1 when one was refused (nothing of it
//! deleted; the one-line reason says what to do), 2 on an error.

use anyhow::Result;
use banklease::paths::{Key, Prefix};
use banklease::CheckpointId;
use banklease_gc::operator::delete::{delete, DeleteRequest, Deletion};
use object_store::ObjectStoreExt;

use crate::output::short_ids;

/// The shortest prefix that stands for a generated id: what the tables print.
const SHORT_ID: usize = 12;
use crate::{out_json, out_line, Ctx, Outcome};

/// Delete each of `given` as `request` asks.
pub(crate) async fn checkpoint_delete(
    ctx: &Ctx,
    given: &[String],
    request: &DeleteRequest,
) -> Result<Outcome> {
    let options = banklease_gc::GcOptions::from_config(&ctx.config);
    let mut refused = false;
    for text in given {
        let deletion = match find(ctx, text).await? {
            Ok(id) => (
                id.to_string(),
                delete(&ctx.bank, &ctx.clock, &options, &id, request).await?,
            ),
            Err(reason) => (text.clone(), Deletion::Refused { reason }),
        };
        let (id, deletion) = deletion;
        if let Deletion::Refused { reason } = &deletion {
            // Whatever the output: one line on stderr, as every refusal.
            eprintln!("not deleted: {reason}");
            refused = true;
        }
        if ctx.json {
            #[derive(serde::Serialize)]
            struct Line<'a> {
                checkpoint_id: &'a str,
                #[serde(flatten)]
                deletion: &'a Deletion,
                dry_run: bool,
            }
            out_json(&Line {
                checkpoint_id: &id,
                deletion: &deletion,
                dry_run: request.dry_run,
            })?;
            continue;
        }
        let verb = if request.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        match &deletion {
            Deletion::Deleted {
                owner_id,
                was,
                objects,
            } => out_line(&format!(
                "{verb} `{id}` (was {was}, owner `{}`){}",
                short_ids(&[owner_id.to_string()])[0],
                if request.dry_run {
                    String::new()
                } else {
                    format!(": {objects} data object(s), then its records")
                }
            ))?,
            Deletion::AlreadyDeleted { .. } => out_line(&format!("`{id}` was deleted already"))?,
            _ => {}
        }
    }
    Ok(if refused { Outcome::No } else { Outcome::Yes })
}

/// The checkpoint `given` names: itself, or the one checkpoint whose id starts with it; else
/// why not.
async fn find(ctx: &Ctx, given: &str) -> Result<std::result::Result<CheckpointId, String>> {
    let bank = &ctx.bank;
    let exact = CheckpointId::parse(given).map_err(banklease::Error::from)?;
    match bank
        .store()
        .head(&Key::Index(exact.clone()).path(bank))
        .await
    {
        Ok(_) => return Ok(Ok(exact)),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => {
            return Err(banklease::Error::store("head", &Key::Index(exact).path(bank), e).into())
        }
    }
    let prefix = Prefix::Checkpoints.path(bank);
    let listing = bank
        .store()
        .list_with_delimiter(Some(&prefix))
        .await
        .map_err(|e| banklease::Error::store("list", &prefix, e))?;
    let mut ids: Vec<String> = listing
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .filter(|id| id.starts_with(given))
        .collect();
    ids.sort();
    // A prefix stands for an id only where the tables cut one: a generated id (a uuid, a
    // hash), given to at least 12 characters. A name someone chose is given whole: `nightly-1`
    // must never delete `nightly-12`.
    let generated =
        |id: &str| id.len() >= 32 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    let named = |ids: &[String]| {
        let shown: Vec<String> = ids.iter().take(5).map(|i| format!("`{i}`")).collect();
        format!(
            "{}{}",
            shown.join(", "),
            if ids.len() > 5 { ", …" } else { "" }
        )
    };
    Ok(match ids.as_slice() {
        [one] if generated(one) && given.len() >= SHORT_ID => {
            Ok(CheckpointId::parse(one).map_err(banklease::Error::from)?)
        }
        [] => Err(format!(
            "no checkpoint `{given}` in bank=`{}`, nor one whose id starts with it",
            bank.label()
        )),
        [_] => Err(format!(
            "no checkpoint `{given}` in bank=`{}`; {} starts with it: give the whole id (a \
             prefix stands only for a generated id, of at least {SHORT_ID} characters)",
            bank.label(),
            named(&ids)
        )),
        many => Err(format!(
            "checkpoint id prefix `{given}` is ambiguous: {} start with it ({}); give more of \
             the id",
            many.len(),
            named(many)
        )),
    })
}
