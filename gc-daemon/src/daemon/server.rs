//! The `/metrics` and `/healthz` server of an active or standby daemon.

use std::sync::Arc;
use std::time::Duration;

use banklease::clock::SharedClock;
use banklease_gc::error::{Error, Result};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics::{self, Metrics};

/// How long open metrics connections may take to finish at shutdown.
const METRICS_STOP_GRACE: Duration = Duration::from_secs(5);

/// The `/metrics` and `/healthz` server, running until stopped.
#[derive(Debug)]
pub(super) struct MetricsServer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl MetricsServer {
    pub(super) async fn start(addr: &str, metrics: Arc<Metrics>) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Metrics {
                context: format!("cannot listen on metrics_addr=`{addr}`"),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| Error::Metrics {
            context: format!("cannot read the bound address of metrics_addr=`{addr}`"),
            source,
        })?;
        info!(addr = %local, "serving /metrics and /healthz");
        let stop = CancellationToken::new();
        let task = tokio::spawn(metrics::serve(
            listener,
            metrics,
            stop.clone().cancelled_owned(),
        ));
        Ok(Self { stop, task })
    }

    /// Stop accepting and let open requests finish, for at most [`METRICS_STOP_GRACE`].
    pub(super) async fn stop(mut self, clock: &SharedClock) {
        self.stop.cancel();
        let ended = tokio::select! {
            ended = &mut self.task => ended,
            () = clock.sleep(METRICS_STOP_GRACE) => {
                warn!(grace = ?METRICS_STOP_GRACE, "metrics connections still open; closing them");
                self.task.abort();
                return;
            }
        };
        match ended {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "the metrics server failed"),
            Err(e) => warn!(error = %e, "the metrics server task ended abnormally"),
        }
    }
}
