//! Sessions: each process holds locks under a holder name of its own, so that two processes
//! given the same owner name (two cron jobs run as `--owner cron`) never both hold a lock.
//!
//! A holder name is `<owner>.<session>` with the session `<host>.<pid>.<random>` (an id, as
//! every holder written so far, so earlier releases read these records). The library treats it
//! as an opaque owner string (re-entry is by equal holder names), so one session may re-acquire
//! what it holds, and nobody else can.

use crate::error::Result;
use crate::id::{local_hostname, validate_id};

/// A new session id for this process: `<host>.<pid>.<random>` (the host's first label, in
/// letters, digits and `-`, at most 32 characters; 8 random hex digits).
pub fn new_session() -> String {
    let host: String = local_hostname()
        .split('.')
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(32)
        .collect();
    let host = if host.is_empty() {
        "host".to_owned()
    } else {
        host
    };
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}.{}.{}", std::process::id(), &random[..8])
}

/// The holder name of `owner` in `session`: `<owner>.<session>`. Both must be ids (see
/// [`validate_id`]), and the whole at most 128 bytes.
pub fn session_holder(owner: &str, session: &str) -> Result<String> {
    validate_id("owner", owner)?;
    validate_id("session", session)?;
    let holder = format!("{owner}.{session}");
    validate_id("holder", &holder)?;
    Ok(holder)
}

/// A holder name split into its owner and session, when it ends like one made by
/// [`session_holder`] with a session of [`new_session`] (`.<host>.<pid>.<8 hex digits>`);
/// otherwise the whole name and `None`.
pub fn split_holder(holder: &str) -> (&str, Option<&str>) {
    let parts: Vec<&str> = holder.rsplitn(4, '.').collect();
    let [random, pid, host, owner] = parts.as_slice() else {
        return (holder, None);
    };
    let is_session = random.len() == 8
        && random.bytes().all(|b| b.is_ascii_hexdigit())
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && !host.is_empty()
        && !owner.is_empty();
    if is_session {
        (owner, Some(&holder[owner.len() + 1..]))
    } else {
        (holder, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_differ_and_holders_split_back() {
        let (a, b) = (new_session(), new_session());
        assert_ne!(a, b);
        let holder = session_holder("cron", &a).unwrap();
        assert_eq!(split_holder(&holder), ("cron", Some(a.as_str())));
        assert_eq!(split_holder("cron"), ("cron", None));
        assert_eq!(
            split_holder("my.app.h-1.42.0badf00d"),
            ("my.app", Some("h-1.42.0badf00d"))
        );
        assert_eq!(split_holder("worker-1.x"), ("worker-1.x", None));
        assert!(session_holder("cr/on", &a).is_err());
        assert!(session_holder(&"x".repeat(120), &a).is_err());
    }
}
