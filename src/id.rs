//! Owner and checkpoint ids and the validation every id passes before it becomes part of an object path.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// The longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// An id that cannot be one path segment. Converts into [`Error::InvalidId`](crate::Error) with
/// the same fields (kept apart so that this module needs nothing of the error module, which
/// names [`OwnerId`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidId {
    /// What kind of id: `owner`, `checkpoint`, ...
    pub kind: &'static str,
    /// The text given as the id (not a valid id), escaped and shortened for display.
    pub given: String,
    /// Which rule it breaks, and what was probably meant where that can be told.
    pub reason: std::borrow::Cow<'static, str>,
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} id=`{}`: {}",
            self.kind, self.given, self.reason
        )
    }
}

impl std::error::Error for InvalidId {}

/// Check that `id` can safely be one path segment.
///
/// Accepted: 1 to [`MAX_ID_LEN`] bytes of ASCII letters, digits, `-`, `_` and `.`, not starting
/// with `.`. This rules out `/`, `..`, control characters, NUL, spaces and unicode lookalikes, so a
/// validated id can never climb out of its directory or alias another key.
pub fn validate_id(kind: &'static str, id: &str) -> Result<(), InvalidId> {
    let reason = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_ID_LEN {
        Some("it is longer than 128 bytes")
    } else if id.starts_with('.') {
        Some("it starts with `.`")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        Some("only ASCII letters, digits, `-`, `_` and `.` are allowed")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(InvalidId {
            kind,
            given: display_id(id),
            reason: reason.into(),
        }),
    }
}

/// An id made safe for an error message: escaped and cut to a readable length.
fn display_id(id: &str) -> String {
    let escaped: String = id.escape_debug().collect();
    if escaped.chars().count() > 80 {
        let head: String = escaped.chars().take(77).collect();
        format!("{head}...")
    } else {
        escaped
    }
}

/// The identity of one running instance of a protection service.
///
/// ```
/// use banklease::OwnerId;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let id = OwnerId::from_host_and_start("node-1", 4242, UNIX_EPOCH + Duration::from_secs(1));
/// assert_eq!(id.as_str().len(), 64);
/// assert!(OwnerId::parse("../etc").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct OwnerId(String);

impl OwnerId {
    /// Parse and validate an owner id given by a user or read from the bank.
    pub fn parse(id: &str) -> Result<Self, InvalidId> {
        validate_id("owner", id)?;
        Ok(Self(id.to_owned()))
    }

    /// The original design's rule: lowercase hex sha256 of the hostname and the process start
    /// timestamp. The pid is mixed in too, so two processes started in the same clock tick on one
    /// host still get different ids.
    pub fn from_host_and_start(hostname: &str, pid: u32, started: SystemTime) -> Self {
        let since = started.duration_since(UNIX_EPOCH).unwrap_or_default();
        let mut hasher = Sha256::new();
        hasher.update(hostname.as_bytes());
        hasher.update(format!("{}.{:09}", since.as_secs(), since.subsec_nanos()).as_bytes());
        hasher.update(pid.to_le_bytes());
        let digest = hasher.finalize();
        Self(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// An id for this process: hostname, pid and `started` (the caller's clock at start-up).
    pub fn for_this_process(started: SystemTime) -> Self {
        let host = local_hostname();
        Self::from_host_and_start(&host, std::process::id(), started)
    }

    /// A random (uuid v4) id, the alternative to the host-and-start rule.
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for OwnerId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        OwnerId::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({})", self.0)
    }
}

/// A validated checkpoint id: one path segment by the rules of [`validate_id`].
///
/// ```
/// use banklease::CheckpointId;
/// assert_eq!(CheckpointId::parse("nightly-2026.11.26").unwrap().as_str(), "nightly-2026.11.26");
/// assert!(CheckpointId::parse("a/b").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct CheckpointId(String);

impl CheckpointId {
    /// Parse and validate a checkpoint id given by a user or read from the bank.
    pub fn parse(id: &str) -> Result<Self, InvalidId> {
        validate_id("checkpoint", id)?;
        Ok(Self(id.to_owned()))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for CheckpointId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CheckpointId::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CheckpointId({})", self.0)
    }
}

impl std::str::FromStr for CheckpointId {
    type Err = InvalidId;
    fn from_str(id: &str) -> Result<Self, InvalidId> {
        Self::parse(id)
    }
}

impl AsRef<str> for CheckpointId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for CheckpointId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// This host's name, or `unknown-host` when the OS will not say.
pub fn local_hostname() -> String {
    hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// The name of this host's store-clock probe, `host-<16 hex digits>`: the same in every
/// process on the host, so its read commands rewrite one object in place instead of adding
/// one each (`Bank::reading_only`). A hash of the hostname and the machine id: either one
/// tells two hosts apart (containers of one image often share a machine id, but not a
/// hostname; cloned machines may share a hostname, but not a machine id), both stay the same
/// across runs and reboots, and the bank names no host. Two hosts that share both share a
/// probe, which makes some of their readings unverified (their ETags differ), never wrong.
pub(crate) fn host_probe_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let machine_id = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        host_probe_name_of(&local_hostname(), machine_id.trim())
    })
}

fn host_probe_name_of(hostname: &str, machine_id: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"banklease clock probe\0");
    hasher.update(hostname.as_bytes());
    hasher.update(b"\0");
    hasher.update(machine_id.as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("host-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn host_and_start_is_deterministic_and_distinct() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let a = OwnerId::from_host_and_start("h", 1, t);
        assert_eq!(a, OwnerId::from_host_and_start("h", 1, t));
        assert_ne!(a, OwnerId::from_host_and_start("h", 2, t));
        assert_ne!(a, OwnerId::from_host_and_start("g", 1, t));
        assert_ne!(
            a,
            OwnerId::from_host_and_start("h", 1, t + Duration::from_nanos(1))
        );
        assert_eq!(a.as_str().len(), 64);
        assert!(a
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        OwnerId::parse(a.as_str()).unwrap();
        OwnerId::parse(OwnerId::random().as_str()).unwrap();
    }

    #[test]
    fn bad_ids_are_refused() {
        let long = "a".repeat(MAX_ID_LEN + 1);
        for bad in [
            "",
            "a/b",
            "..",
            "../x",
            ".hidden",
            "a\0b",
            "a\nb",
            "a b",
            "ünï",
            "a\\b",
            long.as_str(),
        ] {
            let err = OwnerId::parse(bad).unwrap_err();
            assert!(matches!(err, InvalidId { kind: "owner", .. }), "{bad:?}");
        }
        OwnerId::parse(&"a".repeat(MAX_ID_LEN)).unwrap();
        OwnerId::parse("a.b-c_D9").unwrap();
    }

    #[test]
    fn error_message_escapes_and_shortens() {
        let err = OwnerId::parse(&format!("x\0{}", "y".repeat(10_000))).unwrap_err();
        let msg = err.to_string();
        assert!(msg.len() < 300, "{msg}");
        assert!(msg.contains("\\0"), "{msg}");
    }

    #[test]
    fn deserialize_validates() {
        assert!(serde_json::from_str::<OwnerId>("\"a/b\"").is_err());
        assert_eq!(
            serde_json::from_str::<OwnerId>("\"ab\"").unwrap().as_str(),
            "ab"
        );
    }

    #[test]
    fn a_hosts_probe_name_is_stable_and_tells_hosts_apart_by_either_name() {
        let name = host_probe_name_of("node-1", "0123abcd");
        assert_eq!(name, host_probe_name_of("node-1", "0123abcd"));
        assert!(name.starts_with("host-") && name.len() == 21, "{name}");
        assert!(validate_id("probe", &name).is_ok());
        assert_ne!(name, host_probe_name_of("node-2", "0123abcd"));
        assert_ne!(name, host_probe_name_of("node-1", "0123abce"));
        // The separator keeps the two parts apart.
        assert_ne!(
            host_probe_name_of("node-1", "0"),
            host_probe_name_of("node-10", "")
        );
        assert_eq!(host_probe_name(), host_probe_name());
    }
}
