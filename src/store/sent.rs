//! The HTTP requests this process has sent to stores opened by URL, by method: every request
//! of every attempt (retries, Keystone authentications, listing pages) counted where it leaves
//! for the network, for an operator weighing what a command costs (`BANKLEASE_COUNT_REQUESTS=1`
//! prints them as the CLI exits) and for the request table of BENCHMARKS.md.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use http::Method;

/// The methods counted on their own; anything else counts as `other`.
const METHODS: [Method; 5] = [
    Method::GET,
    Method::HEAD,
    Method::PUT,
    Method::POST,
    Method::DELETE,
];

static SENT: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

/// Count one request of `method`.
pub(crate) fn count(method: &Method) {
    let slot = METHODS.iter().position(|m| m == method).unwrap_or(5);
    SENT[slot].fetch_add(1, Ordering::Relaxed);
}

/// What this process has sent so far.
///
/// ```
/// let sent = banklease::store::requests_sent();
/// assert!(sent.total() >= sent.writes());
/// ```
pub fn requests_sent() -> RequestsSent {
    RequestsSent(SENT.each_ref().map(|c| c.load(Ordering::Relaxed)))
}

/// HTTP requests sent, by method (see [`requests_sent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestsSent([u64; 6]);

impl RequestsSent {
    /// Every request.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Requests that may change the store: PUT, POST, DELETE and any other method but GET and
    /// HEAD.
    pub fn writes(&self) -> u64 {
        self.0[2..].iter().sum()
    }

    /// Requests of `method` (any method but GET, HEAD, PUT, POST and DELETE: `other`'s count).
    pub fn of(&self, method: &Method) -> u64 {
        self.0[METHODS.iter().position(|m| m == method).unwrap_or(5)]
    }

    /// Each method's count: `GET`, `HEAD`, `PUT`, `POST`, `DELETE`, `other`.
    pub fn by_method(&self) -> [(&'static str, u64); 6] {
        let names = ["GET", "HEAD", "PUT", "POST", "DELETE", "other"];
        std::array::from_fn(|i| (names[i], self.0[i]))
    }
}

impl fmt::Display for RequestsSent {
    /// `requests=7 writes=3 GET=2 HEAD=2 PUT=3` (methods never sent left out).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "requests={} writes={}", self.total(), self.writes())?;
        for (name, n) in self.by_method() {
            if n > 0 {
                write!(f, " {name}={n}")?;
            }
        }
        Ok(())
    }
}
