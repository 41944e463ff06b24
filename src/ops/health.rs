//! The health server: `/healthz`, `/readyz` and `/metrics` over plain HTTP/1.
//!
//! - `/healthz`: 200 `ok` while the process serves at all (liveness).
//! - `/readyz`: 200 when this process is ready for its role, 503 otherwise. The body is
//!   always `key: value` lines naming the role, so the leader is visible:
//!   ```text
//!   ready
//!   leader: true
//!   caches: synced
//!   ```
//!   A leader (or a process running without election) is ready once every selected
//!   machine's custom resources have been listed (the driver's owned-object caches are
//!   awaited by each reconcile itself; the driver exposes no readiness of its own yet). A
//!   standby is ready as soon as it serves: it has no caches to sync, and a standby that
//!   is never ready would stall every rollout of a 2-replica Deployment.
//! - `/metrics`: the OpenMetrics text of [`Metrics`].
//!
//! # Guarantees
//! - Only GET and HEAD are served (beyond what [`Scrape::route`] answers); anything
//!   else is 405, unknown paths 404.
//! - The server stops accepting when its shutdown token is cancelled and finishes the
//!   requests in flight.
//! - Nothing secret is ever served: the bodies are the metrics and the flags above.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Error;
use super::metrics::Metrics;

/// The process's readiness as the health server reports it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Status {
    inner: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    election: AtomicBool,
    leader: AtomicBool,
    synced: AtomicBool,
}

impl Status {
    /// A status for a process that does (`true`) or does not elect a leader.
    pub fn new(election: bool) -> Self {
        let status = Self::default();
        status.inner.election.store(election, Ordering::SeqCst);
        status
    }

    /// Record whether this process leads.
    pub fn set_leader(&self, leader: bool) {
        self.inner.leader.store(leader, Ordering::SeqCst);
    }

    /// Whether this process leads (always true without election once running).
    pub fn is_leader(&self) -> bool {
        self.inner.leader.load(Ordering::SeqCst)
    }

    /// Record whether the running controllers' caches have synced.
    pub fn set_synced(&self, synced: bool) {
        self.inner.synced.store(synced, Ordering::SeqCst);
    }

    /// Whether the running controllers' caches have synced.
    pub fn is_synced(&self) -> bool {
        self.inner.synced.load(Ordering::SeqCst)
    }

    /// `(ready, body)` for `/readyz`.
    pub fn readiness(&self) -> (bool, String) {
        let election = self.inner.election.load(Ordering::SeqCst);
        let leader = self.is_leader();
        let synced = self.is_synced();
        let (ready, caches) = match (election, leader, synced) {
            (_, _, true) => (true, "synced"),
            (true, false, false) => (true, "standby"),
            (_, _, false) => (false, "syncing"),
        };
        let head = if ready { "ready" } else { "not ready" };
        (
            ready,
            format!("{head}\nleader: {leader}\nleader-election: {election}\ncaches: {caches}\n"),
        )
    }
}

/// What `/metrics` serves: the operator's [`Metrics`], or the instance manager's.
pub trait Scrape: Clone + Send + Sync + 'static {
    /// The OpenMetrics text exposition.
    fn encode(&self) -> String;

    /// A request this server answers beyond the health endpoints (the instance manager's
    /// `POST /backup`, and its `401` to a write without its token): its status code and
    /// plain-text body, or none to leave it to the health endpoints. None by default.
    fn route(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &hyper::HeaderMap,
    ) -> Option<(u16, String)> {
        let _ = (method, path, query, headers);
        None
    }
}

impl Scrape for Metrics {
    fn encode(&self) -> String {
        Metrics::encode(self)
    }
}

/// Serve the health endpoints on `listener` until `shutdown` is cancelled.
///
/// # Errors
/// [`Error::Serve`] if accepting connections fails.
pub async fn serve<S: Scrape>(
    listener: TcpListener,
    status: Status,
    metrics: S,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let builder = Arc::new(builder);
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => accepted.map_err(Error::Serve)?,
            () = shutdown.cancelled() => break,
        };
        let (status, metrics, builder, shutdown) = (
            status.clone(),
            metrics.clone(),
            builder.clone(),
            shutdown.clone(),
        );
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = respond(&request, &status, &metrics);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%error, "health connection ended with an error");
            }
        });
    }
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Bind `addr` for [`serve`].
///
/// # Errors
/// [`Error::Bind`] if the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

fn respond<S: Scrape>(
    request: &Request<Incoming>,
    status: &Status,
    metrics: &S,
) -> Response<Full<Bytes>> {
    if let Some((code, body)) = metrics.route(
        request.method(),
        request.uri().path(),
        request.uri().query(),
        request.headers(),
    ) {
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = text(code, body);
        if code == StatusCode::UNAUTHORIZED {
            // What a 401 must say (RFC 9110): the scheme it wants.
            response.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
        }
        return response;
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
    }
    match request.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => {
            let (ready, body) = status.readiness();
            let code = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            text(code, body)
        }
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(metrics.encode())));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

fn text(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_by_role() {
        let single = Status::new(false);
        assert!(!single.readiness().0);
        single.set_leader(true);
        single.set_synced(true);
        let (ready, body) = single.readiness();
        assert!(ready);
        assert!(body.contains("leader: true"), "{body}");

        let standby = Status::new(true);
        let (ready, body) = standby.readiness();
        assert!(ready, "a standby is ready to take over");
        assert!(body.contains("leader: false"), "{body}");
        assert!(body.contains("caches: standby"), "{body}");

        standby.set_leader(true);
        let (ready, body) = standby.readiness();
        assert!(!ready, "a new leader is not ready before its caches sync");
        assert!(body.contains("caches: syncing"), "{body}");
    }

    #[tokio::test]
    async fn serves_the_endpoints() {
        let listener = bind("127.0.0.1:0".parse().unwrap_or_else(|_| unreachable!()))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let status = Status::new(true);
        let metrics = Metrics::new();
        metrics.set_leader(false);
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener, status, metrics, shutdown.clone()));

        async fn get(addr: SocketAddr, path: &str) -> String {
            use std::io::{Read, Write};
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            tokio::task::spawn_blocking(move || {
                let mut stream = std::net::TcpStream::connect(addr).expect("connect");
                stream.write_all(request.as_bytes()).expect("write");
                let mut out = String::new();
                stream.read_to_string(&mut out).expect("read");
                out
            })
            .await
            .expect("join")
        }
        let healthz = get(addr, "/healthz").await;
        assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
        let readyz = get(addr, "/readyz").await;
        assert!(readyz.starts_with("HTTP/1.1 200"), "{readyz}");
        assert!(readyz.contains("leader: false"), "{readyz}");
        let metrics = get(addr, "/metrics").await;
        assert!(metrics.contains("lockstep_leader 0"), "{metrics}");
        let missing = get(addr, "/nope").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");

        shutdown.cancel();
        server.await.expect("join").expect("serve");
    }
}
