//! `banklease lock put KEY --token T OBJECT FILE|-`: a write fenced by a lock's token, from a
//! shell (see [`banklease::lock::fence::guarded_put`] for the protocol).

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use banklease::lock::LockName;
use banklease::Error;
use object_store::PutPayload;
use serde::Serialize;

use super::{writer_locks_in, Namespace};
use crate::{out_json, out_line, Ctx, Outcome};

/// The largest body `lock put` takes (it is held in memory and written in one request).
const MAX_BODY_BYTES: u64 = 256 * 1024 * 1024;

/// `banklease lock put`
#[derive(Debug, clap::Args)]
pub(crate) struct PutArgs {
    /// The lock whose token guards the write.
    key: String,
    /// The fencing token: printed by `lock acquire`, or BANKLEASE_LOCK_TOKEN under `lock run`.
    #[arg(long, value_name = "TOKEN")]
    token: u64,
    /// The object to write: `/`-separated segments (`reports/nightly.json`), stored under the
    /// bank's `fenced/` directory.
    object: String,
    /// The body: a file, or `-` for standard input (at most 256 MiB).
    file: PathBuf,
    #[command(flatten)]
    ns: Namespace,
}

impl PutArgs {
    /// The lock key as given.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }
}

#[derive(Debug, Serialize)]
struct PutReport<'a> {
    /// `<namespace>/<key>`.
    key: LockName,
    object: &'a str,
    token: u64,
    written: bool,
    bytes: usize,
    /// The highest token the object (or the lock) has seen, when refused.
    highest_seen: Option<u64>,
}

/// Exit 0 written, 1 refused (a newer token exists), 2 error.
pub(crate) async fn put(ctx: &Ctx, args: PutArgs) -> Result<Outcome> {
    let locks = writer_locks_in(ctx, &args.ns.namespace).await?;
    banklease::paths::validate_fenced_object(&args.object).map_err(banklease::Error::from)?;
    let path = banklease::paths::Key::Fenced(args.object.clone()).path(&ctx.bank);
    let body = read_body(&args.file)?;
    let bytes = body.len();
    let full = locks.full_key(&args.key)?;
    let result = locks
        .fenced_put(&args.key, args.token, &path, PutPayload::from(body))
        .await;
    let (written, seen) = match result {
        Ok(_) => (true, None),
        Err(Error::StaleFence { seen, .. }) => (false, Some(seen)),
        Err(e) => return Err(e.into()),
    };
    if ctx.json {
        out_json(&PutReport {
            key: full,
            object: &args.object,
            token: args.token,
            written,
            bytes,
            highest_seen: seen,
        })?;
    } else if written {
        out_line(&format!(
            "written: object=`{}` bytes={bytes} fenced by key=`{full}` token={}",
            args.object, args.token
        ))?;
    } else {
        eprintln!(
            "error: refused: object=`{}` was not written: key=`{full}` has a newer token ({}) \
             than token={}; this holder must stop writing",
            args.object,
            seen.unwrap_or_default(),
            args.token
        );
    }
    Ok(if written { Outcome::Yes } else { Outcome::No })
}

/// The whole body, from `file` or standard input; refused past [`MAX_BODY_BYTES`] with nothing
/// written.
fn read_body(file: &std::path::Path) -> Result<Vec<u8>> {
    let (reader, name): (Box<dyn Read>, String) = if file.as_os_str() == "-" {
        (
            Box::new(std::io::stdin().lock()),
            "standard input".to_owned(),
        )
    } else {
        let f = std::fs::File::open(file)
            .with_context(|| format!("cannot open file=`{}`", file.display()))?;
        (Box::new(f), format!("file=`{}`", file.display()))
    };
    let mut body = Vec::new();
    reader
        .take(MAX_BODY_BYTES + 1)
        .read_to_end(&mut body)
        .with_context(|| format!("cannot read {name}"))?;
    if body.len() as u64 > MAX_BODY_BYTES {
        bail!("{name} is larger than 256 MiB; nothing was written");
    }
    Ok(body)
}
