//! The banks under test and how a (child) process opens one: `memory://`, `file:` (a
//! directory), `s3://bucket/prefix` (moto on 127.0.0.1) and `swift://container/prefix`
//! (single-node Swift on 127.0.0.1). HTTP backends are opened with a [`CountingConnector`].

use std::sync::Arc;

use banklease::store::SwiftBuilder;
use banklease::Bank;
use serde::{Deserialize, Serialize};

use crate::http_count::{CountingConnector, HttpCounters};

/// A kind of store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Memory,
    File,
    S3,
    Swift,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::File => "file",
            Backend::S3 => "s3",
            Backend::Swift => "swift",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "memory" => Backend::Memory,
            "file" => Backend::File,
            "s3" => Backend::S3,
            "swift" => Backend::Swift,
            _ => return None,
        })
    }

    /// Objects survive the process (the bank can be built by one child and used by another).
    pub fn persistent(self) -> bool {
        self != Backend::Memory
    }

    /// Keys per listing page as the server pages them (`None`: no pages, one call).
    pub fn page_size(self) -> Option<u64> {
        match self {
            Backend::Memory | Backend::File => None,
            // ListObjectsV2 without max-keys: the server's default, 1,000 (AWS and moto).
            Backend::S3 => Some(1_000),
            // banklease's Swift backend asks for `limit=10000` (Swift's own maximum).
            Backend::Swift => Some(banklease::store::DEFAULT_LIST_LIMIT as u64),
        }
    }

    /// Whether the environment names a server for this backend (always for memory and file).
    pub fn available(self) -> Result<(), String> {
        let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty());
        match self {
            Backend::Memory | Backend::File => Ok(()),
            Backend::S3 if set("AWS_ENDPOINT") => Ok(()),
            Backend::S3 => {
                Err("AWS_ENDPOINT is not set (eval the export line of .ci/start-s3.sh)".into())
            }
            Backend::Swift
                if std::env::var("BANKLEASE_TEST_SWIFT").as_deref() == Ok("1")
                    && set("ST_AUTH") =>
            {
                Ok(())
            }
            Backend::Swift => Err(
                "BANKLEASE_TEST_SWIFT=1 and ST_AUTH/ST_USER/ST_KEY are not set (eval the export \
                 line of .ci/start-swift.sh)"
                    .into(),
            ),
        }
    }

    /// Where a bank named `name` lives on this backend: a directory under `work_dir` for
    /// files, `bucket/name` or `container/name` on servers, nothing for memory.
    pub fn location(self, work_dir: &std::path::Path, name: &str) -> String {
        match self {
            Backend::Memory => String::new(),
            Backend::File => work_dir.join(name).display().to_string(),
            Backend::S3 => format!(
                "{}/{name}",
                std::env::var("S3_BUCKET").unwrap_or_else(|_| "banklease-test".into())
            ),
            Backend::Swift => format!(
                "{}/{name}",
                std::env::var("SWIFT_CONTAINER").unwrap_or_else(|_| "banklease-test".into())
            ),
        }
    }
}

/// An opened bank and, on HTTP backends, its request counters.
pub struct Opened {
    pub bank: Bank,
    pub http: Option<Arc<HttpCounters>>,
}

impl Opened {
    pub fn http_snapshot(&self) -> std::collections::BTreeMap<String, u64> {
        self.http.as_ref().map(|h| h.snapshot()).unwrap_or_default()
    }

    /// Summed HTTP request durations so far by kind (µs; empty without HTTP).
    pub fn http_busy_by_kind_us(&self) -> std::collections::BTreeMap<String, u64> {
        self.http
            .as_ref()
            .map(|h| h.busy_by_kind_us())
            .unwrap_or_default()
    }

    /// HTTP requests so far answered 5xx or failed in transport (0 without HTTP).
    pub fn http_failed(&self) -> u64 {
        self.http.as_ref().map_or(0, |h| h.failed())
    }

    /// Summed HTTP request durations so far (seconds; 0 without HTTP).
    pub fn http_busy_secs(&self) -> f64 {
        self.http.as_ref().map(|h| h.busy_secs()).unwrap_or(0.0)
    }
}

/// Open the bank at `location` on `backend`.
pub fn open(backend: Backend, location: &str) -> anyhow::Result<Opened> {
    let split = |s: &str| -> (String, String) {
        let (a, b) = s.split_once('/').unwrap_or((s, ""));
        (a.to_owned(), b.to_owned())
    };
    Ok(match backend {
        Backend::Memory => Opened {
            bank: Bank::from_store(
                Arc::new(object_store::memory::InMemory::new()),
                "bench",
                "memory:///bench",
            ),
            http: None,
        },
        Backend::File => Opened {
            bank: Bank::open(&format!("file://{location}"))?,
            http: None,
        },
        Backend::S3 => {
            let (bucket, prefix) = split(location);
            let connector = CountingConnector::default();
            let http = connector.counters();
            // The same configuration as `Bank::open("s3://...")`, plus the counting connector.
            let store = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(&bucket)
                .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
                .with_http_connector(connector)
                .build()?;
            Opened {
                // As `Bank::open` makes an `s3://` bank: conditions in the form the store
                // honours (RGW compares ETags unquoted).
                bank: Bank::from_s3_compatible(
                    Arc::new(store),
                    &prefix,
                    &format!("s3://{location}"),
                ),
                http: Some(http),
            }
        }
        Backend::Swift => {
            let (container, prefix) = split(location);
            let connector = CountingConnector::default();
            let http = connector.counters();
            let store = SwiftBuilder::from_env()
                .with_container(container)
                .with_http_connector(connector)
                .build()?;
            Opened {
                bank: Bank::from_swift(store, &prefix, &format!("swift://{location}")),
                http: Some(http),
            }
        }
    })
}
