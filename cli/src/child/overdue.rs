//! The one `warning:` of a job whose hold (its owner lease, its lock) is not being renewed: at
//! the first failed renewal, or once a renewal is overdue (the store fails or does not answer,
//! and the client is still retrying), whichever comes first; with the time the hold has left
//! and when COMMAND is stopped. One per job, whichever hold it is about: the `error:` line
//! that ends the job says the rest.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use banklease::clock::SharedClock;

use crate::human;

/// Whether the job's one warning was given, shared by the watches of its holds.
#[derive(Debug, Clone, Default)]
pub struct OneWarning(Arc<AtomicBool>);

impl OneWarning {
    /// True the first time only.
    pub fn first(&self) -> bool {
        !self.0.swap(true, Ordering::SeqCst)
    }
}

/// The warning about `what` (``the lock key=`k` ``): not renewed for `since` (when known),
/// because of `cause` (when known), `left` until it runs out, COMMAND stopped `margin` before.
pub fn line(
    what: &str,
    since: Option<Duration>,
    cause: Option<&str>,
    left: Duration,
    margin: Duration,
) -> String {
    let since = since
        .map(|s| format!(" for {}", human(s)))
        .unwrap_or_default();
    let cause = cause.unwrap_or("the store fails or does not answer");
    format!(
        "warning: {what} has not been renewed{since} ({cause}); it holds for {} more, and \
         COMMAND is stopped in {} unless a renewal succeeds by then",
        human(left),
        human(left.saturating_sub(margin))
    )
}

/// Looks at `remaining` (the hold's time left) a few times per `period` (its renewal
/// interval), and gives the warning once no renewal has raised it for a period and a quarter;
/// never completes.
pub async fn watch(
    what: &str,
    remaining: impl Fn() -> Duration,
    period: Duration,
    margin: Duration,
    cause: impl Fn() -> Option<String>,
    warning: &OneWarning,
    clock: &SharedClock,
) -> Infallible {
    // No renewal interval known (a hold without one): nothing can be overdue.
    if period.is_zero() {
        return std::future::pending().await;
    }
    let overdue = period + period / 4;
    let look = (period / 8).clamp(Duration::from_millis(50), Duration::from_secs(1));
    // The time left just after the last renewal: a renewal that lands raises it.
    let mut after_renewal = remaining();
    let mut before = after_renewal;
    loop {
        clock.sleep(look).await;
        let left = remaining();
        if left > before {
            after_renewal = left;
        }
        before = left;
        let since = after_renewal.saturating_sub(left);
        if since > overdue && !left.is_zero() && warning.first() {
            eprintln!(
                "{}",
                line(what, Some(since), cause().as_deref(), left, margin)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_job() {
        let w = OneWarning::default();
        let shared = w.clone();
        assert!(w.first());
        assert!(!shared.first());
        assert!(!w.first());
    }

    #[test]
    fn the_line_says_the_time_left_and_when_command_is_stopped() {
        let l = line(
            "the lock key=`k`",
            Some(Duration::from_secs(5)),
            Some("connection refused"),
            Duration::from_secs(3),
            Duration::from_secs(2),
        );
        assert_eq!(
            l,
            "warning: the lock key=`k` has not been renewed for 5s (connection refused); it \
             holds for 3s more, and COMMAND is stopped in 1s unless a renewal succeeds by then"
        );
    }
}
