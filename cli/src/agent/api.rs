//! The owner agent's HTTP API: what travels over the Unix socket, shared by the server
//! (`banklease run`) and the client (`banklease agent`).
//!
//! HTTP/1.1 over the socket named by `BANKLEASE_AGENT`; request and answer bodies are JSON,
//! except a data upload's body, which is the object's bytes. Every error answer is
//! `{"error": "<message>", "kind": "<kind>"}`.
//!
//! | request                                      | body                      | answer                        |
//! |----------------------------------------------|---------------------------|-------------------------------|
//! | `GET /v1/status`                             | —                         | 200 [`StatusBody`]            |
//! | `GET /v1/valid`                              | —                         | 200 [`ValidBody`], 409 if not |
//! | `POST /v1/checkpoints`                       | `{"id": "cp-1"}`          | 201 [`CheckpointBody`]        |
//! | `PUT /v1/checkpoints/{id}/data/{name}`       | the object's bytes        | 201 [`DataBody`]              |
//! | `POST /v1/checkpoints/{id}/complete`         | `{"status": "available"}` | 200 [`CheckpointBody`]        |
//!
//! ```sh
//! curl --unix-socket "$BANKLEASE_AGENT" http://agent/v1/status
//! curl --unix-socket "$BANKLEASE_AGENT" -X POST -d '{"id":"cp-1"}' http://agent/v1/checkpoints
//! pg_dump db | curl --unix-socket "$BANKLEASE_AGENT" -T - http://agent/v1/checkpoints/cp-1/data/db.sql
//! curl --unix-socket "$BANKLEASE_AGENT" -X POST -d '{"status":"available"}' \
//!      http://agent/v1/checkpoints/cp-1/complete
//! ```

use serde::{Deserialize, Serialize};

/// The environment variable naming the agent's socket.
pub const AGENT_ENV: &str = "BANKLEASE_AGENT";
/// The environment variable holding the owner id.
pub const OWNER_ENV: &str = "BANKLEASE_OWNER_ID";
/// The environment variable holding the bank's label (its URL, without secrets).
pub const BANK_ENV: &str = "BANKLEASE_BANK";

/// Error kinds that mean "refused": the lease (or the agent's shutdown) does not allow the write
/// (exit 1 in the CLI).
pub const REFUSED_KINDS: &[&str] = &["not_valid", "lost", "fenced", "closing"];

/// `GET /v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusBody {
    /// The owner id the agent holds the lease of.
    pub owner_id: String,
    /// The bank (label, no secrets).
    pub bank: String,
    /// `held`, `lost` or `released`.
    pub state: String,
    /// Whether a write sent now would be accepted (zero store requests to tell).
    pub valid: bool,
    /// Time left until the lease runs out (milliseconds; 0 unless held).
    pub remaining_ms: u64,
    /// Why the lease was lost, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The owner's windows (milliseconds).
    pub renew_window_ms: u64,
    /// See `renew_window_ms`.
    pub expire_window_ms: u64,
    /// See `renew_window_ms`.
    pub validity_window_ms: u64,
    /// The checkpoint id prefix this agent requires, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_prefix: Option<String>,
    /// The checkpoints created through this agent, by id.
    pub checkpoints: Vec<CheckpointBody>,
}

/// `GET /v1/valid`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidBody {
    /// Always true in a 200 answer.
    pub valid: bool,
    /// Time left until the lease runs out (milliseconds).
    pub remaining_ms: u64,
}

/// `POST /v1/checkpoints`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// The checkpoint id.
    pub id: String,
}

/// `POST /v1/checkpoints/{id}/complete`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// `available` or `error`.
    pub status: String,
}

/// A checkpoint created through the agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointBody {
    /// The checkpoint id.
    pub id: String,
    /// `protecting`, `available` or `error`.
    pub status: String,
    /// Data objects written through the agent.
    pub data_objects: u64,
    /// Their bytes.
    pub data_bytes: u64,
}

/// `PUT /v1/checkpoints/{id}/data/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DataBody {
    /// The checkpoint id.
    pub id: String,
    /// The data object's name.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// Requests it took: 1 for a single write, else the parts of a multipart upload.
    pub parts: u64,
}

/// Every error answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong and what to do.
    pub error: String,
    /// `not_valid`, `lost`, `fenced`, `closing` (refusals), `bad_request`, `not_found`, `conflict`,
    /// `forbidden`, `unsupported`, `store`, `internal`.
    pub kind: String,
}
