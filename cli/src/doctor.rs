//! `banklease doctor`: the bank's capability table and what each guarantee rests on.
//!
//! The measuring and judging is the library's ([`banklease::doctor`]); this prints it.

use std::time::Duration;

use anyhow::{Context, Result};
use banklease::capability::Condition;
use banklease::doctor::CreateRace;
use banklease::doctor::{self, Basis, DiagnoseOptions, Diagnosis, Expiry, Verdicts};
use serde::Serialize;

use super::{human, out_json, out_line, out_table, Ctx, Outcome};

/// `doctor --json`: the measurements, the verdicts and the answer, as one object.
#[derive(Debug, Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    diagnosis: &'a Diagnosis,
    verdicts: &'a Verdicts,
    /// Whether the bank supports owner leases and the GC (the exit code says the same).
    supported: bool,
    /// What the configuration in use gets wrong without being invalid.
    config_warnings: &'a [String],
    /// Why the configuration in use is refused (`banklease::config::Config::refusals`): the
    /// arithmetic behind a guarantee fails for its windows; every other command refuses to run
    /// with it, and the exit code is 1.
    config_refusals: &'a [String],
    /// The store client's retry budget (`[bank] retry_timeout`, `request_timeout`) and the
    /// shortest `gc.grace` it allows.
    budget: Budget,
    /// Each owner's lease as the gc judges it: the budget it declared and the grace it gets
    /// (the first [`MAX_OWNERS`]).
    owners: &'a [OwnerLine],
    /// Leases beyond the first [`MAX_OWNERS`], not read.
    owners_omitted: u64,
    /// A `file:` bank's file system, and what it means for the store's clock (`null` elsewhere).
    file_system: Option<&'a FileSystemLine>,
    /// Entries of a `file:` bank that are not the bank's own (symbolic links), each named:
    /// kept, never followed.
    links: &'a [String],
}

/// A `file:` bank's file system as `doctor` judges it.
#[derive(Debug, Serialize)]
struct FileSystemLine {
    #[serde(flatten)]
    kind: banklease::store::FileSystem,
    /// What it means for the store's clock and for hosts sharing the bank.
    means: String,
    /// How far this host's clock is ahead of the file server's (negative: behind), read with
    /// the clock probe; only on a network file system. Never part of a judgement.
    host_clock_ahead_ms: Option<i64>,
}

/// The `file:` bank's file system and the links in it (nothing elsewhere).
async fn file_bank(ctx: &Ctx) -> Result<(Option<FileSystemLine>, Vec<String>)> {
    use futures::TryStreamExt;
    let Some(local) = ctx.bank.local() else {
        return Ok((None, Vec::new()));
    };
    let kind = local.file_system();
    // A whole listing: what it meets that is not the bank's own is kept by the store.
    let _: Vec<_> = ctx
        .bank
        .store()
        .list(Some(ctx.bank.prefix()))
        .try_collect()
        .await
        .with_context(|| format!("cannot list bank=`{}`", ctx.bank.label()))?;
    let links = local.take_met();
    let (means, host_clock_ahead_ms) = if kind.network {
        let reading = ctx
            .bank
            .store_time(&ctx.clock)
            .await
            .context("cannot read the file server's clock (the clock probe)")?;
        let host: chrono::DateTime<chrono::Utc> = ctx.clock.system_now().into();
        let ahead = (host - reading.at).num_milliseconds();
        (
            format!(
                "a network file system: its server stamps every write, and every host sharing \
                 the bank reads the server's clock with the clock probe (this host's clock is \
                 {} {} it, which enters no judgement); every host must mount the same export \
                 with working locks (NFSv4, or NFSv3 with lockd) and keep the server's \
                 modification times to the microsecond",
                human(Duration::from_millis(ahead.unsigned_abs())),
                if ahead >= 0 { "ahead of" } else { "behind" }
            ),
            Some(ahead),
        )
    } else {
        (
            "a local file system: the kernel stamps every write with this host's clock, which \
             is the store's clock; hosts that share the bank must share this file system's \
             kernel (one host, or containers on it)"
                .to_owned(),
            None,
        )
    };
    Ok((
        Some(FileSystemLine {
            kind,
            means,
            host_clock_ahead_ms,
        }),
        links,
    ))
}

/// Most owners' leases `doctor` reads.
const MAX_OWNERS: usize = 200;

/// One owner as the gc judges it.
#[derive(Debug, Serialize)]
struct OwnerLine {
    owner_id: String,
    /// What its store client declared (`null`: nothing, a release before declarations).
    retry_budget_ms: Option<u64>,
    /// What the gc judges it by: the declared budget, or the store's longest default.
    judged_budget_ms: u64,
    /// The grace its checkpoints get: `gc.grace`, or longer where its own rules need it.
    grace_ms: u64,
    /// Why the grace is longer, if it is.
    waiting: Option<String>,
    /// Why its lease could not be read, if it could not.
    error: Option<String>,
}

/// Each owner's declarations, read from its lease (the first [`MAX_OWNERS`] listed).
async fn owners(ctx: &Ctx) -> Result<(Vec<OwnerLine>, u64)> {
    use futures::StreamExt;
    let bank = &ctx.bank;
    let prefix = banklease::paths::Prefix::Leases.path(bank);
    let mut listing = bank.store().list(Some(&prefix));
    let mut owners = Vec::new();
    let mut omitted = 0u64;
    while let Some(item) = listing.next().await {
        let meta = item
            .map_err(|e| banklease::Error::store("list", &prefix, e))
            .context("cannot list the owners' leases")?;
        if let Some(banklease::paths::Key::Lease(owner)) =
            banklease::paths::Key::parse(bank, &meta.location)
        {
            if owners.len() < MAX_OWNERS {
                owners.push(owner);
            } else {
                omitted += 1;
            }
        }
    }
    let rules = banklease_gc::pass::declared::OwnerRules::of(bank);
    let options = banklease_gc::GcOptions::from_config(&ctx.config);
    let mut lines = Vec::with_capacity(owners.len());
    for owner in owners {
        let line = match banklease::lease::read_lease(bank, &owner).await {
            Ok(Some((record, _))) => {
                let (grace, waiting) = rules.grace_for(&record, &options);
                OwnerLine {
                    owner_id: owner.to_string(),
                    retry_budget_ms: record.retry_budget_ms,
                    judged_budget_ms: crate::ms(rules.budget(record.retry_budget_ms).budget),
                    grace_ms: crate::ms(grace),
                    waiting,
                    error: None,
                }
            }
            // Gone since the listing: nothing to say about it.
            Ok(None) => continue,
            Err(e) => OwnerLine {
                owner_id: owner.to_string(),
                retry_budget_ms: None,
                judged_budget_ms: 0,
                grace_ms: 0,
                waiting: None,
                error: Some(banklease::error::error_chain(&e)),
            },
        };
        lines.push(line);
    }
    Ok((lines, omitted))
}

impl OwnerLine {
    fn human(&self) -> String {
        if let Some(e) = &self.error {
            return format!("owner {}: its lease cannot be read: {e}", self.owner_id);
        }
        let budget = crate::human(Duration::from_millis(self.judged_budget_ms));
        let budget = match self.retry_budget_ms {
            Some(_) => format!("declares a {budget} retry budget"),
            None => format!("declares no retry budget (judged as {budget}, the store's default)"),
        };
        let grace = crate::human(Duration::from_millis(self.grace_ms));
        match &self.waiting {
            Some(_) => format!(
                "owner {}: {budget}; its checkpoints get a grace of {grace}, longer than \
                 gc.grace, because create-if-absent is not atomic on this store",
                self.owner_id
            ),
            None => format!("owner {}: {budget}; grace {grace}", self.owner_id),
        }
    }
}

/// The budget in force, for the report.
#[derive(Debug, Serialize)]
struct Budget {
    retry_budget_ms: u64,
    /// Zero when any grace will do (no store client, or not on Swift).
    shortest_grace_ms: u64,
}

impl Budget {
    fn of(ctx: &Ctx) -> Self {
        Self {
            retry_budget_ms: crate::ms(ctx.bank.retry_budget()),
            shortest_grace_ms: crate::ms(ctx.config.shortest_grace()),
        }
    }

    fn line(&self, ctx: &Ctx) -> String {
        let grace = match self.shortest_grace_ms {
            0 => "any gc.grace".to_owned(),
            _ => format!(
                "gc.grace of at least {}",
                crate::human(ctx.config.shortest_grace())
            ),
        };
        let set =
            |v: Option<std::time::Duration>| v.map_or_else(|| "default".to_owned(), crate::human);
        format!(
            "store client retry budget: {} (bank.retry_timeout={}, bank.request_timeout={}); \
             it allows {grace}",
            crate::human(ctx.bank.retry_budget()),
            set(ctx.config.bank.retry_timeout),
            set(ctx.config.bank.request_timeout),
        )
    }
}

/// `banklease doctor`
pub(super) async fn run(ctx: &Ctx, race_rounds: u32) -> Result<Outcome> {
    let options = DiagnoseOptions {
        race_rounds,
        ..DiagnoseOptions::default()
    };
    let diagnosis = doctor::diagnose(&ctx.bank, &ctx.clock, &options)
        .await
        .with_context(|| format!("cannot diagnose bank=`{}`", ctx.bank.label()))?;
    let verdicts = diagnosis.verdicts();
    let supported = verdicts.supports_leasing_and_gc();
    // The configuration's own pitfalls (windows no observer can judge valid, ...), and the
    // windows whose arithmetic fails for this bank: the same check as at load, which a `--bank`
    // given on the command line (applied after loading) has not been through.
    let checked = ctx.config.check()?;
    let (owners, owners_omitted) = owners(ctx).await?;
    let (file_system, links) = file_bank(ctx).await?;
    if ctx.json {
        out_json(&Report {
            diagnosis: &diagnosis,
            verdicts: &verdicts,
            supported,
            config_warnings: &checked.warnings,
            config_refusals: &checked.refusals,
            budget: Budget::of(ctx),
            owners: &owners,
            owners_omitted,
            file_system: file_system.as_ref(),
            links: &links,
        })?;
    } else {
        print_human(&diagnosis, &verdicts, supported)?;
        out_line(&Budget::of(ctx).line(ctx))?;
        for owner in &owners {
            out_line(&owner.human())?;
        }
        if owners_omitted > 0 {
            out_line(&format!(
                "and {owners_omitted} more owners' leases, not read (`banklease lease show` \
                 names each one's)"
            ))?;
        }
        if let Some(fs) = &file_system {
            out_line(&format!("file system: {} — {}", fs.kind.kind, fs.means))?;
        }
        if !links.is_empty() {
            out_line(&format!(
                "not the bank's own, kept and never followed ({}): {}",
                links.len(),
                links.join(", ")
            ))?;
        }
        for warning in &checked.warnings {
            out_line(&format!("configuration warning: {warning}"))?;
        }
        for refusal in &checked.refusals {
            out_line(&format!("configuration refused: {refusal}"))?;
        }
    }
    Ok(if supported && checked.refusals.is_empty() {
        Outcome::Yes
    } else {
        Outcome::No
    })
}

fn condition(c: Condition) -> &'static str {
    match c {
        Condition::Enforced => "enforced",
        Condition::Refused => "refused",
        Condition::Ignored => "IGNORED (silently)",
    }
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

fn race_cell(rounds: u32, writers: u32, bad: u32, max: u32, looked_atomic: bool) -> String {
    if looked_atomic {
        format!("looked atomic: one winner of {writers} in each of {rounds} rounds")
    } else if rounds == 0 {
        "not measured".to_owned()
    } else {
        format!(
            "NOT atomic: several winners in {bad} of {rounds} rounds (at most {max} of {writers})"
        )
    }
}

fn create_race_cell(r: Option<&CreateRace>) -> String {
    match r {
        Some(r) => race_cell(
            r.rounds,
            r.writers,
            r.rounds_with_several_winners,
            r.max_winners,
            r.rounds > 0 && r.looked_atomic(),
        ),
        None => "not measured (create-if-absent is refused)".to_owned(),
    }
}

fn us(micros: u64) -> String {
    if micros < 1_000 {
        format!("{micros}µs")
    } else if micros < 10_000 {
        format!("{:.1}ms", micros as f64 / 1000.0)
    } else {
        human(Duration::from_micros(micros))
    }
}

fn print_human(d: &Diagnosis, v: &Verdicts, supported: bool) -> Result<()> {
    out_line(&format!("bank: {}", d.bank))?;
    out_line("")?;
    let update_race = match &d.update_race {
        Some(r) => race_cell(
            r.rounds,
            r.writers,
            r.rounds_with_several_winners,
            r.max_winners,
            r.looked_atomic(),
        ),
        None => "not measured (conditional overwrite is not enforced)".to_owned(),
    };
    let renewal = match (d.renewal, &d.refused_for_leasing) {
        (Some(m), _) => serde_json::to_value(m)?.as_str().unwrap_or("?").to_owned(),
        (None, Some(why)) => format!("none: refused for leasing ({why})"),
        (None, None) => "none".to_owned(),
    };
    let expiry = match d.expiry {
        Expiry::NotOffered => "not offered by this backend".to_owned(),
        Expiry::Honoured { gone_after_ms } => format!(
            "yes: HEAD answered 404 {} after a PUT with X-Delete-After: 1",
            human(Duration::from_millis(gone_after_ms))
        ),
        Expiry::NotHonoured { waited_ms } => format!(
            "NO: still served {} after a PUT with X-Delete-After: 1",
            human(Duration::from_millis(waited_ms))
        ),
    };
    let c = &d.clock_offset;
    let offset = format!(
        "{:+}ms ± {}ms (store minus this host: positive = the store is ahead){}",
        c.offset_ms,
        c.uncertainty_ms,
        match c.store_resolution_ms {
            0 => String::new(),
            r => format!("; store stamps have {r}ms resolution"),
        }
    );
    let latency = |s: &doctor::LatencyStats| {
        format!(
            "median {}, p95 {}, max {} ({} sequential)",
            us(s.median_us),
            us(s.p95_us),
            us(s.max_us),
            s.samples
        )
    };
    let rows = vec![
        vec![
            "create-if-absent".to_owned(),
            condition(d.create_if_absent).to_owned(),
        ],
        vec![
            "  under a race".to_owned(),
            create_race_cell(d.create_race.as_ref()),
        ],
        vec![
            "conditional overwrite (If-Match)".to_owned(),
            if d.unquoted_etags {
                format!(
                    "{} (the store rejects its own quoted ETag; the unquoted form is honoured, \
                     and sent)",
                    condition(d.conditional_overwrite)
                )
            } else {
                condition(d.conditional_overwrite).to_owned()
            },
        ],
        vec!["  under a race".to_owned(), update_race],
        vec!["lease renewal".to_owned(), renewal],
        vec!["server-side expiry".to_owned(), expiry],
        vec![
            "listing shows deleted objects".to_owned(),
            yes_no(d.listing.shows_deleted),
        ],
        vec![
            "listing shows expired objects".to_owned(),
            d.listing
                .shows_expired
                .map_or_else(|| "-".to_owned(), yes_no),
        ],
        vec!["clock offset".to_owned(), offset],
        vec![
            "Date header (read-only judging)".to_owned(),
            match d.date_header {
                // A reader of a `file:` bank judges by this host's clock, which stamps every
                // write there, when the file system keeps its stamps exact.
                None if d.bank.starts_with("file:") && d.clock_offset.store_resolution_ms == 0 => {
                    "none needed: a reader of this file: bank judges by this host's clock, \
                     which stamps its writes"
                        .to_owned()
                }
                None => "none: a user who may only read cannot judge on this store".to_owned(),
                Some(h) if h.disagreement_ms == 0 => format!(
                    "agrees with the stamps (Date minus stamp {:+}ms): read-only judging is \
                     sound",
                    h.offset_ms
                ),
                Some(h) => format!(
                    "DISAGREES with the stamps by {}ms beyond its second (Date minus stamp \
                     {:+}ms): a front end dates the answers with its own clock; read-only \
                     judging would be off by as much",
                    h.disagreement_ms, h.offset_ms
                ),
            },
        ],
        vec!["latency PUT".to_owned(), latency(&d.latency.put)],
        vec!["latency HEAD".to_owned(), latency(&d.latency.head)],
    ];
    out_table(&["CAPABILITY", "MEASURED"], &rows)?;
    out_line("")?;
    let rows: Vec<Vec<String>> = [
        ("owner lease", &v.owner_lease),
        ("completion vs collection", &v.completion_vs_collection),
        ("named locks", &v.named_locks),
        ("fenced writes (lock put)", &v.fenced_writes),
    ]
    .into_iter()
    .map(|(name, verdict)| {
        vec![
            name.to_owned(),
            verdict.basis.to_string(),
            verdict.why.clone(),
        ]
    })
    .collect();
    out_table(&["GUARANTEE", "BASIS", "WHY"], &rows)?;
    out_line("")?;
    let timing = [&v.owner_lease, &v.completion_vs_collection]
        .iter()
        .any(|g| g.basis == Basis::Timing);
    if let Some(h) = d.date_header.filter(|h| h.disagreement_ms > 0) {
        out_line(&format!(
            "read-only judging: UNSOUND here: the Date of the store's answers is {}ms off its \
             stamps; a user who may only read would judge leases that far off (fix the front \
             end's clock or have it pass the store's Date on)",
            h.disagreement_ms
        ))?;
    }
    out_line(&if !supported {
        "verdict: NOT supported: this bank cannot keep owner leases and the GC safe".to_owned()
    } else if timing {
        "verdict: supported, partly on timing only: keep expire_window, skew_margin and grace \
         generous against the latency above"
            .to_owned()
    } else {
        "verdict: supported: owner leases and the GC rest on atomic primitives".to_owned()
    })
}

/// `doctor --read-only`: what reading alone can check.
#[derive(Debug, Serialize)]
struct ReadOnlyReport {
    bank: String,
    /// The descriptor's layout and writer, or why there is none.
    descriptor: String,
    /// Lease objects listed.
    leases: u64,
    /// Protecting markers listed.
    protecting: u64,
    /// Where the store's time comes from without writing, or why it cannot be had.
    store_time: String,
    /// Writes are not checked.
    writes: &'static str,
    config_warnings: Vec<String>,
    config_refusals: Vec<String>,
}

/// `banklease doctor --read-only`: exit 0 when everything readable was read, 1 when the
/// configuration's windows are refused for this bank (as `doctor`), 2 when a read failed.
pub(super) async fn read_only(ctx: &Ctx) -> Result<Outcome> {
    use futures::TryStreamExt;
    let bank = &ctx.bank;
    let descriptor = match banklease::layout::read(bank).await {
        Ok(Some(d)) => format!("layout {} (written by {})", d.layout, d.created_by),
        Ok(None) => "none (a bank made before descriptors: layout 1)".to_owned(),
        Err(e) => return Err(e).context("cannot read the bank's descriptor"),
    };
    let count = |prefix: object_store::path::Path| async move {
        let listed: Vec<_> = bank
            .store()
            .list(Some(&prefix))
            .try_collect()
            .await
            .with_context(|| format!("cannot list `{prefix}` in bank=`{}`", bank.label()))?;
        anyhow::Ok(listed.len() as u64)
    };
    let leases = count(banklease::paths::Prefix::Leases.path(bank)).await?;
    let protecting = count(banklease::paths::Prefix::Protecting.path(bank)).await?;
    // Nothing is written, the clock probe included: say where judging takes the time from.
    let store_time = match bank.local() {
        Some(local) if local.file_system().network => format!(
            "a network file system ({}), whose server stamps every write: judging needs the \
             clock probe (write access to `_banklease/clock/`)",
            local.file_system().kind
        ),
        Some(local) if local.keeps_exact_mtime() => {
            "this host's clock, which is a file: bank's clock: judging works read-only".to_owned()
        }
        Some(_) => "this host's clock, but this file system rounds stamps: judging needs the \
                    clock probe (write access to `_banklease/clock/`)"
            .to_owned(),
        None => match bank.store_time_from_date(&ctx.clock).await {
            Ok(Some(t)) => format!(
                "the Date header of the store's answers ({}, to the second): judging works \
                 read-only, a second less certain; `banklease doctor` with write access checks \
                 that the Date agrees with the store's stamps",
                t.at.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            Ok(None) => "the store's answers carry no Date header: judging needs the clock \
                         probe (write access to `_banklease/clock/`)"
                .to_owned(),
            Err(e) => return Err(e).context("cannot read the store's time from a Date header"),
        },
    };
    let checked = ctx.config.check()?;
    let report = ReadOnlyReport {
        bank: bank.label().to_owned(),
        descriptor,
        leases,
        protecting,
        store_time,
        writes: "not checked (--read-only): run `banklease doctor` with write access",
        config_warnings: checked.warnings,
        config_refusals: checked.refusals,
    };
    if ctx.json {
        out_json(&report)?;
    } else {
        let lines = [
            ("bank", report.bank.clone()),
            ("descriptor", report.descriptor.clone()),
            ("leases", report.leases.to_string()),
            ("protecting", report.protecting.to_string()),
            ("store time", report.store_time.clone()),
            ("writes", report.writes.to_owned()),
        ];
        for (key, value) in lines {
            out_line(&format!("{key:<12} {value}"))?;
        }
        for warning in &report.config_warnings {
            out_line(&format!("configuration warning: {warning}"))?;
        }
        for refusal in &report.config_refusals {
            out_line(&format!("configuration refused: {refusal}"))?;
        }
    }
    // As `doctor`: windows refused for this bank are a "no".
    Ok(if report.config_refusals.is_empty() {
        Outcome::Yes
    } else {
        Outcome::No
    })
}
