//! The owner agent: answers the API of [`super::api`] for the command `banklease run` started,
//! with the owner lease `run` holds.
//!
//! Invariant: **every write is judged by the library, at the instant it is sent.** The agent
//! holds one [`OwnerLease`] and writes through [`Checkpoint`], so each create, data write, part
//! of a multipart upload and completion is preceded by `ensure_valid` (zero requests), exactly
//! as in a Rust owner. The agent adds no state the store does not already hold, except which
//! checkpoints it created — so that it can complete the ones left protecting when the command
//! exits, and refuse writes to checkpoints it did not create.
//!
//! Invariant: **only the agent's own uid is served.** The socket is created mode 0600 in a
//! private (0700) directory, and every request's peer credentials (`SO_PEERCRED`) are checked
//! as well, so that a socket passed on, or a directory made wider, still serves nobody else.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Path, Request, State};
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::serve::IncomingStream;
use axum::Router;
use banklease::checkpoint::Status;
use banklease::CheckpointId;
use banklease::{Checkpoint, LeaseState, OwnerLease};
use tokio::net::UnixListener;

use super::answer::{ApiError, Json};
use super::api::{CheckpointBody, CompleteBody, CreateBody, DataBody, StatusBody, ValidBody};
use super::upload::upload;

/// Uploads served at once; more wait (memory: at most this many part buffers).
const MAX_UPLOADS: usize = 4;

/// The agent's state, shared by every request.
#[derive(Debug)]
pub struct Agent {
    lease: OwnerLease,
    bank: String,
    prefix: Option<String>,
    uid: u32,
    checkpoints: Mutex<BTreeMap<String, Held>>,
    /// Every request that writes holds a read guard; `close` takes the write side, so once it
    /// returns no write is in flight and none will start (`true`: closed).
    gate: tokio::sync::RwLock<bool>,
    uploads: tokio::sync::Semaphore,
}

#[derive(Debug, Clone)]
struct Held {
    checkpoint: Checkpoint,
    status: Status,
    data_objects: u64,
    data_bytes: u64,
    /// Data uploads running on this checkpoint; it cannot be completed meanwhile.
    uploading: u32,
    /// A completion is under way; no upload may start.
    completing: bool,
}

impl Agent {
    /// An agent for `lease`, serving uid `uid`, requiring ids that start with `prefix`.
    pub fn new(lease: OwnerLease, prefix: Option<String>, uid: u32) -> Arc<Self> {
        Arc::new(Self {
            bank: lease.bank().label().to_owned(),
            lease,
            prefix,
            uid,
            checkpoints: Mutex::new(BTreeMap::new()),
            gate: tokio::sync::RwLock::new(false),
            uploads: tokio::sync::Semaphore::new(MAX_UPLOADS),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Held>> {
        self.checkpoints.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stop serving writes: wait (at most `wait`) for those in flight, then refuse new ones.
    /// False when some were still in flight at the deadline (they may still land).
    pub async fn close(&self, wait: std::time::Duration) -> bool {
        match tokio::time::timeout(wait, self.gate.write()).await {
            Ok(mut closed) => {
                *closed = true;
                true
            }
            Err(_) => false,
        }
    }

    /// Enter a writing request: refused once the agent is closing.
    async fn enter(&self) -> Result<tokio::sync::RwLockReadGuard<'_, bool>, ApiError> {
        let guard = self.gate.read().await;
        if *guard {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "closing",
                "the agent is shutting down (COMMAND exited or the lease ended); nothing was \
                 written"
                    .to_owned(),
            ));
        }
        Ok(guard)
    }

    /// The checkpoints created through the agent and still protecting.
    pub fn protecting(&self) -> Vec<Checkpoint> {
        self.held()
            .values()
            .filter(|h| h.status == Status::Protecting)
            .map(|h| h.checkpoint.clone())
            .collect()
    }

    /// Record that `id` was completed as `status` (by the agent itself, at the command's exit).
    pub fn completed(&self, id: &str, status: Status) {
        if let Some(h) = self.held().get_mut(id) {
            h.status = status;
        }
    }

    fn status(&self) -> StatusBody {
        let windows = self.lease.windows();
        let (state, reason) = match self.lease.state() {
            LeaseState::Held { .. } => ("held", None),
            LeaseState::Lost { reason } => ("lost", Some(reason)),
            LeaseState::Released => ("released", None),
        };
        StatusBody {
            owner_id: self.lease.owner_id().to_string(),
            bank: self.bank.clone(),
            state: state.to_owned(),
            valid: self.lease.check_validity(),
            remaining_ms: ms(self.lease.remaining()),
            reason,
            renew_window_ms: ms(windows.renew_window),
            expire_window_ms: ms(windows.expire_window),
            validity_window_ms: ms(windows.validity_window),
            checkpoint_prefix: self.prefix.clone(),
            checkpoints: self
                .held()
                .iter()
                .map(|(id, h)| CheckpointBody {
                    id: id.clone(),
                    status: h.status.to_string(),
                    data_objects: h.data_objects,
                    data_bytes: h.data_bytes,
                })
                .collect(),
        }
    }

    /// Start an upload into `id`: checked and counted in one critical section, so that no
    /// completion can start between the check and the count (and then succeed while the upload
    /// writes into a completed checkpoint).
    fn begin_upload(&self, id: &str) -> Result<Checkpoint, ApiError> {
        let mut all = self.held();
        let checkpoint = check(&all, id, None)?.checkpoint.clone();
        all.get_mut(id).expect("checked above").uploading += 1;
        Ok(checkpoint)
    }

    /// Start completing `id` as `outcome`: refused while an upload runs or another completion
    /// is under way, in the same critical section as [`begin_upload`](Self::begin_upload)'s.
    fn begin_completion(&self, id: &str, outcome: Status) -> Result<Held, ApiError> {
        let mut all = self.held();
        let held = check(&all, id, Some(outcome))?.clone();
        if held.uploading > 0 {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                format!(
                    "checkpoint_id=`{id}` has {} data upload(s) still running; wait for them \
                     before completing it",
                    held.uploading
                ),
            ));
        }
        all.get_mut(id).expect("checked above").completing = true;
        Ok(held)
    }
}

/// A checkpoint created through this agent and still protecting (or, with `done`, already
/// completed as `done`: a retried completion is answered as the first one was), on the map as
/// locked by the caller.
fn check<'a>(
    all: &'a BTreeMap<String, Held>,
    id: &str,
    done: Option<Status>,
) -> Result<&'a Held, ApiError> {
    CheckpointId::parse(id).map_err(|e| ApiError::from(banklease::Error::from(e)))?;
    let held = all.get(id).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "checkpoint_id=`{id}` was not created through this agent; create it first \
                 (`banklease agent checkpoint create {id}`)"
            ),
        )
    })?;
    if held.completing {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("checkpoint_id=`{id}` is being completed; it takes no more writes"),
        ));
    }
    if held.status != Status::Protecting && Some(held.status) != done {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "checkpoint_id=`{id}` is already completed as `{}`; it takes no more writes",
                held.status
            ),
        ));
    }
    Ok(held)
}

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The peer of one connection: its uid, when the kernel tells.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    uid: Option<u32>,
}

impl Connected<IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        Peer {
            uid: stream.io().peer_cred().ok().map(|c| c.uid()),
        }
    }
}

/// Whether a peer may be served: only the agent's own uid.
pub fn peer_allowed(peer_uid: Option<u32>, agent_uid: u32) -> bool {
    peer_uid == Some(agent_uid)
}

async fn only_our_uid(
    State(agent): State<Arc<Agent>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    request: Request,
    next: Next,
) -> Response {
    if peer_allowed(peer.uid, agent.uid) {
        return next.run(request).await;
    }
    let who = peer.uid.map_or("unknown".to_owned(), |u| u.to_string());
    ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "requests from uid=`{who}` are refused: this agent serves only uid=`{}`",
            agent.uid
        ),
    )
    .into_response()
}

/// The agent's routes.
pub fn router(agent: Arc<Agent>) -> Router {
    Router::new()
        .route("/v1/status", get(status))
        .route("/v1/valid", get(valid))
        .route("/v1/checkpoints", post(create))
        .route("/v1/checkpoints/{id}/data/{name}", put(put_data))
        .route("/v1/checkpoints/{id}/complete", post(complete))
        .fallback(unknown)
        .method_not_allowed_fallback(unknown)
        .layer(middleware::from_fn_with_state(agent.clone(), only_our_uid))
        .with_state(agent)
}

/// Serve `router` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: UnixListener,
    agent: Arc<Agent>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router(agent).into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

async fn unknown(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no such request: {method} {}; the agent answers GET /v1/status, GET /v1/valid, \
             POST /v1/checkpoints, PUT /v1/checkpoints/{{id}}/data/{{name}} and POST \
             /v1/checkpoints/{{id}}/complete",
            uri.path()
        ),
    )
}

async fn status(State(agent): State<Arc<Agent>>) -> Json<StatusBody> {
    Json(StatusCode::OK, agent.status())
}

async fn valid(State(agent): State<Arc<Agent>>) -> Result<Json<ValidBody>, ApiError> {
    agent.lease.ensure_valid()?;
    Ok(Json(
        StatusCode::OK,
        ValidBody {
            valid: true,
            remaining_ms: ms(agent.lease.remaining()),
        },
    ))
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &Bytes, example: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the request body is not the JSON expected ({e}); send e.g. {example}"),
        )
    })
}

async fn create(
    State(agent): State<Arc<Agent>>,
    body: Bytes,
) -> Result<Json<CheckpointBody>, ApiError> {
    let _open = agent.enter().await?;
    let CreateBody { id } = parse_json(&body, r#"{"id": "cp-1"}"#)?;
    let checkpoint_id = CheckpointId::parse(&id).map_err(banklease::Error::from)?;
    if let Some(prefix) = &agent.prefix {
        if !id.starts_with(prefix.as_str()) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!(
                    "checkpoint_id=`{id}` does not start with prefix=`{prefix}`, which this \
                     agent requires (`banklease run --checkpoint-prefix`)"
                ),
            ));
        }
    }
    let checkpoint = Checkpoint::create(&agent.lease, &checkpoint_id).await?;
    agent.held().insert(
        id.clone(),
        Held {
            checkpoint,
            status: Status::Protecting,
            data_objects: 0,
            data_bytes: 0,
            uploading: 0,
            completing: false,
        },
    );
    tracing::info!(checkpoint_id = %id, "checkpoint created");
    Ok(Json(
        StatusCode::CREATED,
        CheckpointBody {
            id,
            status: Status::Protecting.to_string(),
            data_objects: 0,
            data_bytes: 0,
        },
    ))
}

async fn put_data(
    State(agent): State<Arc<Agent>>,
    Path((id, name)): Path<(String, String)>,
    body: Body,
) -> Result<Json<DataBody>, ApiError> {
    let _open = agent.enter().await?;
    banklease::id::validate_id("data object", &name).map_err(banklease::Error::from)?;
    let _slot =
        agent.uploads.acquire().await.map_err(|e| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?;
    let checkpoint = agent.begin_upload(&id)?;
    let uploaded = upload(&checkpoint, &name, body).await;
    if let Some(h) = agent.held().get_mut(&id) {
        h.uploading -= 1;
        if let Ok((bytes, _)) = &uploaded {
            h.data_objects += 1;
            h.data_bytes += bytes;
        }
    }
    let (bytes, parts) = uploaded?;
    Ok(Json(
        StatusCode::CREATED,
        DataBody {
            id,
            name,
            bytes,
            parts,
        },
    ))
}

async fn complete(
    State(agent): State<Arc<Agent>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<CheckpointBody>, ApiError> {
    let CompleteBody { status } = parse_json(&body, r#"{"status": "available"}"#)?;
    let outcome = match status.as_str() {
        "available" => Status::Available,
        "error" => Status::Error,
        other => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("an owner completes a checkpoint as `available` or `error`, not `{other}`"),
            ))
        }
    };
    let _open = agent.enter().await?;
    let held = agent.begin_completion(&id, outcome)?;
    let completed = held.checkpoint.complete(outcome).await;
    if let Some(h) = agent.held().get_mut(&id) {
        h.completing = false;
    }
    completed?;
    agent.completed(&id, outcome);
    tracing::info!(checkpoint_id = %id, status = %outcome, "checkpoint completed");
    Ok(Json(
        StatusCode::OK,
        CheckpointBody {
            id,
            status: outcome.to_string(),
            data_objects: held.data_objects,
            data_bytes: held.data_bytes,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use banklease_testkit::cid;

    /// An upload and a completion of one checkpoint exclude each other: each is checked and
    /// counted in one critical section, so neither can start between the other's check and its
    /// mark (before, an upload's check and its count were two, and a completion between them
    /// succeeded while the upload then wrote into an `available` checkpoint).
    #[tokio::test]
    async fn an_upload_and_a_completion_exclude_each_other() {
        use banklease::clock::MockClock;
        use banklease::{Bank, LeaseWindows, OwnerId};
        let bank = Bank::open("memory://").unwrap();
        let windows = LeaseWindows::new(
            std::time::Duration::from_secs(10),
            std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(1),
        )
        .unwrap();
        let lease = OwnerLease::acquire(
            &bank,
            OwnerId::random(),
            windows,
            Arc::new(MockClock::new()),
        )
        .await
        .unwrap();
        let checkpoint = Checkpoint::create(&lease, &cid("cp-1")).await.unwrap();
        let agent = Agent::new(lease, None, 0);
        agent.held().insert(
            "cp-1".into(),
            Held {
                checkpoint,
                status: Status::Protecting,
                data_objects: 0,
                data_bytes: 0,
                uploading: 0,
                completing: false,
            },
        );
        agent.begin_upload("cp-1").unwrap();
        let refused = agent
            .begin_completion("cp-1", Status::Available)
            .unwrap_err();
        assert!(
            format!("{refused:?}").contains("still running"),
            "{refused:?}"
        );
        agent.held().get_mut("cp-1").unwrap().uploading -= 1;
        agent.begin_completion("cp-1", Status::Available).unwrap();
        let refused = agent.begin_upload("cp-1").unwrap_err();
        assert!(
            format!("{refused:?}").contains("being completed"),
            "{refused:?}"
        );
        let refused = agent
            .begin_completion("cp-1", Status::Available)
            .unwrap_err();
        assert!(
            format!("{refused:?}").contains("being completed"),
            "{refused:?}"
        );
    }

    #[test]
    fn only_the_agents_own_uid_is_served() {
        assert!(peer_allowed(Some(1000), 1000));
        assert!(!peer_allowed(Some(0), 1000), "not even root");
        assert!(!peer_allowed(Some(1001), 1000));
        assert!(!peer_allowed(None, 1000), "unknown peers are refused");
    }
}
