//! `banklease init`: make the configured bank a bank (and, where banklease can, its bucket or
//! container), recording its layout version.

use anyhow::{bail, Context, Result};
use banklease::layout::{self, Initialised, LAYOUT_VERSION};
use serde::Serialize;

use crate::{out_json, out_line, Ctx, Outcome};

#[derive(Debug, Serialize)]
struct InitReport<'a> {
    bank: &'a str,
    layout: u32,
    /// `created`, `adopted` (a bank made before `init` existed) or `already`.
    outcome: &'static str,
    container_created: bool,
}

/// `banklease init [--create-container]`
pub(crate) async fn init(ctx: &Ctx, create_container: bool) -> Result<Outcome> {
    let label = ctx.bank.label();
    let mut container_created = false;
    if create_container {
        if let Some(swift) = ctx.bank.swift() {
            swift.create_container().await.with_context(|| {
                format!(
                    "cannot create container=`{}` of bank=`{label}`",
                    swift.container()
                )
            })?;
            container_created = true;
        } else if ctx.bank.local().is_none() && !label.starts_with("memory:") {
            bail!(
                "--create-container: banklease cannot create the bucket or container of \
                 bank=`{label}`; create it with the provider's tools (e.g. `aws s3 mb`, `az \
                 storage container create`, `gcloud storage buckets create`), then run \
                 `banklease init` again"
            );
        }
        // file: and memory: banks have no container to create.
    }
    let outcome = layout::init(&ctx.bank)
        .await
        .with_context(|| format!("cannot initialise bank=`{label}`"))?;
    let outcome = match outcome {
        Initialised::Created => "created",
        Initialised::Adopted => "adopted",
        Initialised::Already => "already",
    };
    if ctx.json {
        out_json(&InitReport {
            bank: label,
            layout: LAYOUT_VERSION,
            outcome,
            container_created,
        })?;
    } else {
        let what = match outcome {
            "created" => "bank created",
            "adopted" => "existing bank adopted (descriptor written)",
            _ => "already a bank",
        };
        out_line(&format!("{what}: bank=`{label}` layout={LAYOUT_VERSION}"))?;
    }
    Ok(Outcome::Yes)
}
