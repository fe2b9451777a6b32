//! The doctor's verdicts: from a [`Diagnosis`] alone (no request), what each guarantee rests on
//! on this bank — an atomic primitive, timing, or nothing.

use std::fmt;

use serde::Serialize;

use super::Diagnosis;
use crate::capability::{self, Condition, RenewalMechanism};
use crate::race::{CreateRace, UpdateRace};

/// What one guarantee rests on, on one bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// An atomic primitive of the store decides it: no timing assumption is needed.
    Atomic,
    /// Only timing keeps it: the windows (expire + skew margin + grace against the owner's
    /// validity window) must hold.
    Timing,
    /// The bank cannot give it; banklease refuses the bank for this use.
    NotAtAll,
    /// Offered only where atomic; banklease refuses it on this bank (no timing fallback).
    Refused,
}

impl Basis {
    /// The name used in JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Atomic => "atomic",
            Basis::Timing => "timing",
            Basis::NotAtAll => "not-at-all",
            Basis::Refused => "refused",
        }
    }
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One guarantee's verdict: its basis and one sentence why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// What the guarantee rests on here.
    pub basis: Basis,
    /// Why, in one sentence.
    pub why: String,
}

impl Verdict {
    fn new(basis: Basis, why: impl Into<String>) -> Self {
        Self {
            basis,
            why: why.into(),
        }
    }
}

/// The verdict for each guarantee.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdicts {
    /// An owner's lease: acquired, renewed, and never renewed once replaced or deleted.
    pub owner_lease: Verdict,
    /// An owner's completion and the GC's collection of one checkpoint: at most one wins.
    pub completion_vs_collection: Verdict,
    /// Mutual exclusion of named locks: at most one holder at a time.
    pub named_locks: Verdict,
    /// Fenced writes (`lock put --token`): once a newer holder's write landed, no older
    /// holder's write lands.
    pub fenced_writes: Verdict,
}

impl Verdicts {
    /// True when the bank can serve what banklease is configured for: owner leases and the GC.
    /// Named locks are optional and do not count.
    pub fn supports_leasing_and_gc(&self) -> bool {
        self.owner_lease.basis != Basis::NotAtAll
            && self.completion_vs_collection.basis != Basis::NotAtAll
    }
}

impl Diagnosis {
    /// One verdict per guarantee, from the measurements alone (no request).
    pub fn verdicts(&self) -> Verdicts {
        let named = named_locks(
            self.create_if_absent,
            self.conditional_overwrite,
            self.create_race.as_ref(),
            self.update_race.as_ref(),
        );
        Verdicts {
            owner_lease: owner_lease(
                self.create_if_absent,
                self.conditional_overwrite,
                self.renewal,
                self.update_race.as_ref(),
            ),
            completion_vs_collection: completion_vs_collection(
                self.create_if_absent,
                self.create_race.as_ref(),
            ),
            fenced_writes: fenced_writes(named.basis, self.repeated_etag.as_deref()),
            named_locks: named,
        }
    }
}

/// The owner-lease verdict from the capability probe alone, without racing anything: what the
/// GC daemon checks before it starts.
pub fn owner_lease_verdict(caps: &capability::Capabilities) -> Verdict {
    owner_lease(
        caps.create_if_absent,
        caps.conditional_overwrite,
        Some(caps.renewal),
        None,
    )
}

fn condition_name(c: Condition) -> &'static str {
    match c {
        Condition::Enforced => "enforced",
        Condition::Refused => "refused",
        Condition::Ignored => "silently ignored",
    }
}

/// The kebab-case name serde gives the mechanism, so that variants added later print too.
fn mechanism_name(m: RenewalMechanism) -> String {
    serde_json::to_value(m)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{m:?}"))
}

fn owner_lease(
    create: Condition,
    overwrite: Condition,
    renewal: Option<RenewalMechanism>,
    update_race: Option<&UpdateRace>,
) -> Verdict {
    if create != Condition::Enforced {
        return Verdict::new(
            Basis::NotAtAll,
            format!(
                "create-if-absent is {}, so an owner cannot know that the lease it wrote is its \
                 own; banklease refuses the bank for leasing",
                condition_name(create)
            ),
        );
    }
    let Some(renewal) = renewal else {
        return Verdict::new(
            Basis::NotAtAll,
            "the capability probe refused the bank for leasing",
        );
    };
    if renewal != RenewalMechanism::ConditionalUpdate || overwrite != Condition::Enforced {
        return Verdict::new(
            Basis::Timing,
            format!(
                "acquired by create-if-absent but renewed by `{}` (conditional overwrite is {}), \
                 which is not atomic against another writer: the GC stays out of that gap only \
                 because it acts after expiry + skew margin + grace",
                mechanism_name(renewal),
                condition_name(overwrite)
            ),
        );
    }
    match update_race {
        Some(race) if race.rounds_with_several_winners > 0 => Verdict::new(
            Basis::Timing,
            format!(
                "renewed by If-Match, but more than one racing If-Match writer won in {} of {} \
                 rounds, so a renewal can land on a replaced lease; only expiry + skew margin + \
                 grace keeps the GC out",
                race.rounds_with_several_winners, race.rounds
            ),
        ),
        _ => Verdict::new(
            Basis::Atomic,
            "acquired by create-if-absent and renewed by an If-Match overwrite, so a renewal never \
             lands on a lease that was replaced or deleted",
        ),
    }
}

fn completion_vs_collection(create: Condition, race: Option<&CreateRace>) -> Verdict {
    if create != Condition::Enforced {
        return Verdict::new(
            Basis::NotAtAll,
            format!(
                "create-if-absent is {}, so the owner and the GC could both win `decisions/<id>` \
                 and a completed checkpoint could be collected",
                condition_name(create)
            ),
        );
    }
    match race {
        Some(r) if r.rounds_with_several_winners > 0 => Verdict::new(
            Basis::Timing,
            format!(
                "`decisions/<id>` is created if absent, but more than one racing creator won in \
                 {} of {} rounds (at most {} of {}): exclusion rests on the owner deciding only \
                 while check_validity() holds and the GC only after expiry + skew margin + grace",
                r.rounds_with_several_winners, r.rounds, r.max_winners, r.writers
            ),
        ),
        Some(r) if r.rounds > 0 => Verdict::new(
            Basis::Atomic,
            format!(
                "the owner and the GC both create `decisions/<id>` if absent, and {} racing \
                 creators had exactly one winner in each of {} rounds",
                r.writers, r.rounds
            ),
        ),
        _ => Verdict::new(
            Basis::Timing,
            "create-if-absent is enforced but was not raced, so it is not shown atomic; rely on \
             expiry + skew margin + grace",
        ),
    }
}

fn named_locks(
    create: Condition,
    overwrite: Condition,
    create_race: Option<&CreateRace>,
    update_race: Option<&UpdateRace>,
) -> Verdict {
    let refused = |why: String| Verdict::new(Basis::Refused, why);
    if create != Condition::Enforced {
        return refused(format!(
            "create-if-absent is {}, so two holders could take the same lock",
            condition_name(create)
        ));
    }
    if overwrite != Condition::Enforced {
        return refused(format!(
            "conditional overwrite is {}, so a holder could not renew or release a lock without \
             possibly overwriting the next holder's",
            condition_name(overwrite)
        ));
    }
    match (create_race, update_race) {
        (Some(c), _) if c.rounds_with_several_winners > 0 => refused(format!(
            "more than one racing creator won in {} of {} rounds, so two holders could take the \
             same lock",
            c.rounds_with_several_winners, c.rounds
        )),
        (_, Some(u)) if u.rounds_with_several_winners > 0 => refused(format!(
            "more than one racing If-Match writer won in {} of {} rounds, so two holders could \
             renew the same lock",
            u.rounds_with_several_winners, u.rounds
        )),
        (Some(c), Some(u)) if c.looked_atomic() && u.looked_atomic() => Verdict::new(
            Basis::Atomic,
            "create-if-absent and If-Match are enforced and every race had one winner",
        ),
        _ => refused("the races were not run, so the conditions are not shown atomic".to_owned()),
    }
}

/// Fenced writes stand on named locks (the token is a lock's counter) and on If-Match telling
/// every write apart: where the ETag is a hash of the content, a newer holder's rewrite of the
/// same bytes leaves it as an older holder read it (`lock::support::ensure_fencing_supported`).
fn fenced_writes(named_locks: Basis, repeated_etag: Option<&str>) -> Verdict {
    if named_locks != Basis::Atomic {
        return Verdict::new(
            Basis::Refused,
            "fencing tokens are a named lock's counter, and named locks are refused here",
        );
    }
    match repeated_etag {
        Some(etag) => Verdict::new(
            Basis::Refused,
            format!(
                "the store's ETag is a hash of the content (a condition on a first write's \
                 etag={etag} still held after the same bytes were written again), so a paused \
                 older holder's If-Match would still match after a newer holder rewrote the same \
                 bytes; `lock put` is refused here (named locks and their tokens are not \
                 affected)"
            ),
        ),
        None => Verdict::new(
            Basis::Atomic,
            "every write changes the ETag, so once a newer holder's write lands an older \
             holder's If-Match fails",
        ),
    }
}
