//! `banklease init`: make the configured bank a bank (and, where banklease can, its bucket or
//! container), recording its layout version.

use anyhow::{bail, Context, Result};
use banklease::layout::{self, Initialised, LAYOUT_VERSION};
use banklease::store::{classify, StoreCause};
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

/// `banklease init [--create-container]`: on Swift the container is made first when missing
/// and the user may (a PUT on it, as restic does; `--create-container` asks nothing more). On
/// S3, Azure and GCS banklease makes no bucket: a missing one is named with the command that
/// makes it.
pub(crate) async fn init(ctx: &Ctx, create_container: bool) -> Result<Outcome> {
    let label = ctx.bank.label();
    let mut container_created = false;
    if let Some(swift) = ctx.bank.swift() {
        match swift.create_container().await {
            Ok(created) => container_created = created,
            // Not allowed to create containers (a user with an ACL on this one only): the
            // container may well exist; the descriptor's write says if it does not.
            Err(object_store::Error::PermissionDenied { .. }) => {}
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "cannot create container=`{}` of bank=`{label}`",
                    swift.container()
                )))
            }
        }
    } else if create_container && ctx.bank.local().is_none() && !label.starts_with("memory:") {
        bail!(
            "--create-container: banklease cannot create the bucket or container of \
             bank=`{label}`; {}, then run `banklease init` again",
            make_it(label)
        );
    }
    let initialised = layout::init(&ctx.bank).await;
    if initialised.is_err() && container_created {
        // Nothing is left of a refused init: the container it made goes again (it is empty).
        if let Some(swift) = ctx.bank.swift() {
            if let Err(e) = swift.delete_container().await {
                tracing::warn!(error = %e, "removing the container init made failed");
            }
        }
    }
    let outcome = match initialised {
        Ok(outcome) => outcome,
        Err(e) if container_missing(&e) && ctx.bank.swift().is_none() => bail!(
            "cannot initialise bank=`{label}`: its bucket or container does not exist; {}, then \
             run `banklease init` again",
            make_it(label)
        ),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("cannot initialise bank=`{label}`")))
        }
    };
    // What every later command would otherwise measure of the store (the lock probe's racing
    // writes, the stamps' resolution), measured once here and kept in the bank.
    ctx.bank
        .measure(&ctx.clock)
        .await
        .with_context(|| format!("cannot measure the store of bank=`{label}`"))?;
    if container_created && !ctx.json {
        if let Some(swift) = ctx.bank.swift() {
            out_line(&format!(
                "container created: container=`{}`",
                swift.container()
            ))?;
        }
    }
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

/// Whether `e` says the bank's bucket or container does not exist.
fn container_missing(e: &banklease::Error) -> bool {
    matches!(e, banklease::Error::Store { source, .. }
        if matches!(classify(source), StoreCause::ContainerMissing { .. }))
}

/// How to make the bucket or container of the bank at `url`: the provider's command.
fn make_it(url: &str) -> String {
    let name = |rest: &str| rest.split('/').next().unwrap_or_default().to_owned();
    if let Some(rest) = url.strip_prefix("s3://") {
        format!("create it with `aws s3 mb s3://{}`", name(rest))
    } else if let Some(rest) = url.strip_prefix("az://") {
        format!(
            "create it with `az storage container create --name {}`",
            name(rest)
        )
    } else if let Some(rest) = url.strip_prefix("gs://") {
        format!(
            "create it with `gcloud storage buckets create gs://{}`",
            name(rest)
        )
    } else {
        "create it with the provider's tools".to_owned()
    }
}
