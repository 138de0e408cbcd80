//! HTTP endpoints of the daemon: `/metrics`, `/healthz`, `/readyz`,
//! `/status`, and the admin trigger `POST /jobs/{job}/run`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::daemon::runner::{NotStarted, Runner};
use crate::model::Kind;
use crate::run::jobs::Trigger;

/// File descriptors kept for everything but HTTP connections (the stores'
/// pools, the binlog, subscriptions, logs).
const FILES_KEPT: u64 = 256;

/// The connections served at once: `configured`, but never so many that
/// accepting them would leave the process without file descriptors
/// (`open_files`: its limit, when known), which would stall every accept,
/// the probes' included.
fn connection_cap(configured: usize, open_files: Option<u64>) -> usize {
    let Some(limit) = open_files else {
        return configured;
    };
    let room = usize::try_from(limit.saturating_sub(FILES_KEPT)).unwrap_or(usize::MAX);
    configured.min(room.max(1))
}

/// Serves `app` on `listener` until `stop`, HTTP/1 only (probes and
/// Prometheus speak it), with bounds a plain `axum::serve` lacks: at most
/// `max_connections` at once (more wait in the listen backlog; fewer when
/// the open-file limit is lower), and a connection that sends no complete
/// request head within `header_timeout` (a silent or slow client, or an
/// idle keep-alive) is closed. Both together keep the probes answered:
/// idle connections cost a slot for at most the timeout, and the cap is
/// far above what a few clients hold. On `stop`, open connections finish
/// their request in hand and close.
#[allow(clippy::expect_used, reason = "the semaphore is never closed")]
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    max_connections: usize,
    stop: CancellationToken,
) {
    let open_files = crate::metrics::process::open_files_limit();
    let cap = connection_cap(max_connections, open_files);
    if cap < max_connections {
        tracing::warn!(
            configured = max_connections,
            serving = cap,
            open_files,
            "http.max_connections is above what the open-file limit allows: raise the limit (ulimit -n)"
        );
    }
    let slots = Arc::new(Semaphore::new(cap));
    let connections = TaskTracker::new();
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("never closed"),
            _ = stop.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait, don't spin.
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let stop = stop.clone();
        connections.spawn(async move {
            let mut http1 = hyper::server::conn::http1::Builder::new();
            http1
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = http1.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(slot);
        });
    }
    connections.close();
    connections.wait().await;
}

pub fn router(runner: Arc<Runner>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/jobs/{job}/run", post(run_job))
        .with_state(runner)
}

async fn metrics(State(r): State<Arc<Runner>>) -> Response {
    r.show_pace();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        r.metrics.encode(),
    )
        .into_response()
}

/// Ready when both stores answer and this process's shard's pass has a
/// holder (this process, or another's live lease; rule 19); each failure
/// is named, never a URL, and a pass without holder says why.
async fn readyz(State(r): State<Arc<Runner>>) -> Response {
    let (mysql_ok, redis_ok) = r.probe_dependencies().await;
    let word = |ok| if ok { "ok" } else { "unreachable" };
    let mut body = json!({"mysql": word(mysql_ok), "redis": word(redis_ok)});
    // None: this process takes no pass lease (no seat job, a dry run).
    let holding = r.holding();
    if let Some(h) = &holding {
        body["pass"] = json!(h);
    }
    let body = Json(body);
    if mysql_ok && redis_ok && holding.is_none_or(|h| h.has_holder()) {
        (StatusCode::OK, body).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

#[allow(clippy::expect_used, reason = "our own status serializes")]
async fn status(State(r): State<Arc<Runner>>) -> Json<serde_json::Value> {
    let s = &r.ctx.settings;
    let jobs: serde_json::Map<String, serde_json::Value> = r
        .status()
        .into_iter()
        .map(|(k, st)| {
            (
                k.label().to_string(),
                serde_json::to_value(st).expect("status"),
            )
        })
        .collect();
    let passes: serde_json::Map<String, serde_json::Value> = r
        .shard_status()
        .into_iter()
        .map(|(i, st)| (i.to_string(), serde_json::to_value(st).expect("status")))
        .collect();
    let pace = r
        .pace()
        .map(|(rate, backoffs)| json!({"hashes_per_second": rate.round(), "backoffs": backoffs}));
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "instance": s.reconcile.instance,
        "dry_run": s.reconcile.dry_run,
        "key_prefix": s.redis.key_prefix,
        "shard": {"index": s.sharding.index, "total": s.sharding.total},
        "pass": {
            "schedule": s.pass.schedule,
            "fallback": r.fallback(),
            "shards": passes,
            "pace": pace,
        },
        "changes": r.changes().map(|c| c.status()),
        // What one replica carries at the measured rates, and the shards
        // this estate and its traffic need.
        "capacity": r.capacity(),
        // Where the passes' bulk reads go (`mysql.replica_url`; null: off).
        "mysql_replica": r.ctx.replica.as_ref().map(|replica| replica.status()),
        "contract": contract_status(&r),
        // Rule 18: each permission a store refused since the start.
        "permissions": {"denied": r.ctx.denials.to_json()},
        "jobs": jobs,
    }))
}

/// `/status`'s `contract` (rule 17): how the schema deviates from the
/// contract as the last run read it, holding deviations first, each with
/// what it holds (or why it is harmless) and its fix.
fn contract_status(r: &Runner) -> serde_json::Value {
    let state = r.ctx.mysql.contract();
    let deviations = crate::run::jobs::deviations::DeviationReport::all(&state);
    json!({
        "holding": deviations.iter().filter(|d| d.holds).count(),
        "deviations": deviations,
    })
}

/// Constant-time comparison (`subtle`), so the token cannot be guessed
/// byte by byte.
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(given, expected).into()
}

async fn run_job(
    State(r): State<Arc<Runner>>,
    Path(job): Path<String>,
    headers: HeaderMap,
) -> Response {
    let expected = r.ctx.settings.http.admin_token.expose();
    if expected.is_empty() {
        return StatusCode::NOT_FOUND.into_response();
    }
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !same_token(given.as_bytes(), expected.as_bytes()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
        )
            .into_response();
    }
    let Ok(kind) = job.parse::<Kind>() else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("unknown job {job:?}")})),
        )
            .into_response();
    };
    match r.start(Trigger::Admin { kind }, false) {
        Ok(()) => (
            StatusCode::ACCEPTED,
            Json(json!({"job": kind.label(), "started": true})),
        )
            .into_response(),
        Err(NotStarted::AlreadyRunning) => (
            StatusCode::CONFLICT,
            Json(json!({"job": kind.label(), "error": "already running"})),
        )
            .into_response(),
        Err(NotStarted::ShuttingDown) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::connection_cap;

    #[test]
    fn the_connection_cap_leaves_files_for_the_rest() {
        assert_eq!(connection_cap(4096, None), 4096);
        assert_eq!(connection_cap(4096, Some(1_048_576)), 4096);
        assert_eq!(connection_cap(4096, Some(1024)), 768);
        assert_eq!(connection_cap(64, Some(1024)), 64);
        assert_eq!(connection_cap(4096, Some(100)), 1);
    }

    #[test]
    fn token_comparison() {
        assert!(super::same_token(b"abc", b"abc"));
        assert!(!super::same_token(b"abd", b"abc"));
        assert!(!super::same_token(b"ab", b"abc"));
        assert!(!super::same_token(b"", b"abc"));
    }
}
