//! The connections of the HTTP server: the accept loop, the header read timeout, the cap on
//! open connections, and the open-files limit they live within.
//!
//! `axum::serve` keeps every connection for as long as its client likes: headers sent at one
//! byte a second are never timed out, so a few hundred such connections use up the process's
//! file descriptors and nobody else is served (issue 25). Here each connection is served by
//! hyper directly, with:
//!
//! - a deadline for the first request's headers ([`ConnLimits::header_timeout`]), whatever the
//!   protocol (it also covers the HTTP/1-or-2 detection), and hyper's HTTP/1 header read
//!   timeout for every later request, which also closes a keep-alive connection left idle that
//!   long;
//! - at most [`ConnLimits::max_connections`] open at once. A connection becomes *proven* once a
//!   request on it has carried a valid bearer token (the gate marks it, see [`ConnMark`]); when
//!   the cap is reached, the oldest unproven connection is closed to make room for the new one,
//!   so a flood of connections that never authenticate cannot push out agents at work. When
//!   every open connection is proven, the new one is closed at once;
//! - when `accept` itself fails for want of file descriptors, the oldest unproven connection is
//!   closed and accepting resumes a moment later.
//!
//! [`raise_open_files_limit`] lifts the soft `RLIMIT_NOFILE` to the hard limit at start-up, and
//! [`effective_cap`] keeps the cap below what the limit allows.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower_service::Service as _;

/// Default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default `--header-timeout`.
pub const DEFAULT_HEADER_TIMEOUT: &str = "10s";
/// File descriptors kept for everything but connections (mounts, databases, watches, logs,
/// commands' pipes) when the cap is fitted under the open-files limit.
pub const FD_RESERVE: u64 = 256;
/// How long shutdown waits for connections to finish once asked to close.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);
/// The pause after `accept` failed (for want of file descriptors or otherwise).
const ACCEPT_RETRY: Duration = Duration::from_millis(20);

/// The connection limits (flags `--max-connections`, `--header-timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// At most this many connections open at once.
    pub max_connections: usize,
    /// Longest wait for a request's headers.
    pub header_timeout: Duration,
}

/// Raises the soft open-files limit to the hard limit; returns the soft limit now in force
/// (`None` when it cannot be read).
pub fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current?;
    let Some(maximum) = limit.maximum else {
        // No hard limit: "infinity" is refused for this resource; keep the soft limit.
        return Some(current);
    };
    if current >= maximum {
        return Some(current);
    }
    crate::storage::exec::keep_open_files_limit_for_commands(current);
    let raised = rustix::process::Rlimit {
        current: Some(maximum),
        maximum: Some(maximum),
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::info!(from = current, to = maximum, "raised the open-files limit");
            Some(maximum)
        }
        Err(error) => {
            tracing::warn!(%error, current, maximum, "cannot raise the open-files limit");
            Some(current)
        }
    }
}

/// The cap actually enforced: `wanted`, lowered (with a warning) so that the connections and
/// [`FD_RESERVE`] fit within `open_files` descriptors.
pub fn effective_cap(wanted: usize, open_files: Option<u64>) -> usize {
    let Some(open_files) = open_files else {
        return wanted;
    };
    let room = usize::try_from(open_files.saturating_sub(FD_RESERVE))
        .unwrap_or(usize::MAX)
        .max(16);
    if wanted > room {
        tracing::warn!(
            max_connections = wanted,
            open_files,
            cap = room,
            "--max-connections does not fit the open-files limit (ulimit -n); serving at most {room} connections"
        );
        room
    } else {
        wanted
    }
}

/// Carried in each request's extensions: lets the gate mark the connection proven once a
/// request on it carries a valid token.
#[derive(Debug, Clone)]
pub struct ConnMark(Arc<AtomicBool>);

impl ConnMark {
    /// Marks the connection as one of an authenticated client: it is no longer closed to make
    /// room for new connections.
    pub fn prove(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One open connection, as the table sees it.
#[derive(Debug)]
struct Open {
    proven: Arc<AtomicBool>,
    close: CancellationToken,
}

/// Every open connection, oldest first (ids grow with age).
#[derive(Debug)]
pub struct Connections {
    cap: usize,
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Open>>,
    /// How many connections were closed or refused to respect the cap (for the log).
    shed: AtomicU64,
}

/// What [`Connections::admit`] decided for a new connection.
#[derive(Debug)]
pub enum Admission {
    /// Serve it; it is `id` in the table, closed when `close` is cancelled.
    Serve {
        /// Its id (its age).
        id: u64,
        /// Its mark, for its requests.
        mark: ConnMark,
        /// Cancelled when it is shed.
        close: CancellationToken,
    },
    /// Every open connection is proven and the cap is reached: close it at once.
    Refuse,
}

impl Connections {
    /// An empty table holding at most `cap` connections.
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            next: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
            shed: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Open>> {
        // Every operation leaves the map whole; a panic elsewhere cannot half-update it.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many connections are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Takes a new connection in, closing the oldest unproven one when the cap is reached.
    pub fn admit(&self) -> Admission {
        let mut open = self.lock();
        let full = open.len() >= self.cap;
        if full && !Self::shed_oldest_unproven(&mut open) {
            drop(open);
            self.count_shed("refused a new connection: every open connection is authenticated");
            return Admission::Refuse;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let proven = Arc::new(AtomicBool::new(false));
        let close = CancellationToken::new();
        open.insert(
            id,
            Open {
                proven: proven.clone(),
                close: close.clone(),
            },
        );
        drop(open);
        if full {
            self.count_shed("closed the oldest unauthenticated connection");
        }
        Admission::Serve {
            id,
            mark: ConnMark(proven),
            close,
        }
    }

    /// Closes the oldest unproven connection (when out of file descriptors); whether there was
    /// one.
    pub fn shed_one(&self) -> bool {
        let shed = Self::shed_oldest_unproven(&mut self.lock());
        if shed {
            self.count_shed(
                "out of file descriptors: closed the oldest unauthenticated connection",
            );
        }
        shed
    }

    /// Cancels and forgets the oldest unproven connection of `open`; whether there was one.
    fn shed_oldest_unproven(open: &mut BTreeMap<u64, Open>) -> bool {
        let oldest = open
            .iter()
            .find(|(_, conn)| !conn.proven.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        match oldest.and_then(|id| open.remove(&id)) {
            Some(conn) => {
                conn.close.cancel();
                true
            }
            None => false,
        }
    }

    /// Logs the first shed connection, then one line per thousand (a flood must not flood the
    /// log too).
    fn count_shed(&self, what: &str) {
        let n = self.shed.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 || n.is_multiple_of(1000) {
            tracing::warn!(
                total = n,
                cap = self.cap,
                "{what} (--max-connections {} reached)",
                self.cap
            );
        }
    }

    /// Forgets connection `id` (it ended).
    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Asks every connection to close (shutdown).
    fn close_all(&self) {
        for conn in self.lock().values() {
            conn.close.cancel();
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves; then stops accepting, asks every
/// connection to finish (HTTP/1 keep-alive off, HTTP/2 GOAWAY) and waits for them (at most
/// [`CLOSE_LIMIT`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    connections: Arc<Connections>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let stop = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
            // Reap finished connection tasks so the set does not grow without bound.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                let out_of_files =
                    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                if out_of_files {
                    connections.shed_one();
                } else {
                    tracing::debug!(%error, "accept failed");
                }
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let (id, mark, close) = match connections.admit() {
            Admission::Serve { id, mark, close } => (id, mark, close),
            Admission::Refuse => {
                drop(stream);
                continue;
            }
        };
        // An answer goes out as an SSE stream in several small writes (headers, priming event,
        // message, end); with Nagle's algorithm each waits for the client's delayed ACK, ~40 ms
        // a call (measured by benches/http.rs).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let task = Connection {
            builder: builder.clone(),
            app: app.clone(),
            mark,
            close,
            stop: stop.clone(),
            header_timeout: limits.header_timeout,
        };
        let leaving = Leaving {
            table: connections.clone(),
            id,
        };
        tasks.spawn(async move {
            task.run(stream).await;
            drop(leaving);
        });
    }
    drop(listener);
    stop.cancel();
    connections.close_all();
    let finished = tokio::time::timeout(CLOSE_LIMIT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            open = tasks.len(),
            "connections still open {CLOSE_LIMIT:?} after shutdown; closing them"
        );
        tasks.abort_all();
    }
}

/// Takes a connection out of the table when its task ends, however it ends (a task aborted at
/// shutdown, or one that panicked, must not hold a place under the cap).
struct Leaving {
    table: Arc<Connections>,
    id: u64,
}

impl Drop for Leaving {
    fn drop(&mut self) {
        self.table.remove(self.id);
    }
}

/// One accepted connection and what it needs.
struct Connection {
    builder: Arc<auto::Builder<TokioExecutor>>,
    app: Router,
    mark: ConnMark,
    /// Cancelled when this connection is shed: closed at once.
    close: CancellationToken,
    /// Cancelled at shutdown: finish the request in progress, then close.
    stop: CancellationToken,
    header_timeout: Duration,
}

impl Connection {
    async fn run(self, stream: tokio::net::TcpStream) {
        let seen_request = Arc::new(AtomicBool::new(false));
        let service = {
            let app = self.app;
            let mark = self.mark;
            let seen = seen_request.clone();
            hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
                seen.store(true, Ordering::Relaxed);
                request.extensions_mut().insert(mark.clone());
                let mut app = app.clone();
                async move {
                    let response: Result<axum::response::Response, Infallible> =
                        app.call(request.map(Body::new)).await;
                    response
                }
            })
        };
        let connection = self.builder.serve_connection(TokioIo::new(stream), service);
        let mut connection = std::pin::pin!(connection);
        // The first request's headers must arrive in time whatever the protocol: hyper's own
        // timeout covers HTTP/1 heads only once the protocol is known.
        let first_deadline = tokio::time::sleep(self.header_timeout);
        let mut first_deadline = std::pin::pin!(first_deadline);
        let mut waiting_first = true;
        let mut stopping = false;
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::trace!(%error, "connection ended");
                    }
                    return;
                }
                () = self.close.cancelled() => return,
                () = &mut first_deadline, if waiting_first => {
                    if !seen_request.load(Ordering::Relaxed) {
                        tracing::debug!("closed a connection whose first request did not arrive in time");
                        return;
                    }
                    waiting_first = false;
                }
                () = self.stop.cancelled(), if !stopping => {
                    stopping = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(admission: Admission) -> (u64, ConnMark, CancellationToken) {
        match admission {
            Admission::Serve { id, mark, close } => (id, mark, close),
            Admission::Refuse => panic!("refused"),
        }
    }

    #[test]
    fn the_oldest_unproven_connection_makes_room() {
        let table = Connections::new(3);
        let (_, first, first_close) = served(table.admit());
        let (_, _, second_close) = served(table.admit());
        let (_, _, third_close) = served(table.admit());
        first.prove();
        // Full: the oldest unproven (the second) goes, the proven first stays.
        let (_, _, fourth_close) = served(table.admit());
        assert!(!first_close.is_cancelled());
        assert!(second_close.is_cancelled());
        assert!(!third_close.is_cancelled());
        assert_eq!(table.len(), 3);
        assert!(table.shed_one());
        assert!(third_close.is_cancelled());
        assert!(!fourth_close.is_cancelled());
    }

    #[test]
    fn when_every_connection_is_proven_the_new_one_is_refused() {
        let table = Connections::new(2);
        for _ in 0..2 {
            let (_, mark, _) = served(table.admit());
            mark.prove();
        }
        assert!(matches!(table.admit(), Admission::Refuse));
        assert!(!table.shed_one());
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn the_cap_fits_the_open_files_limit() {
        assert_eq!(effective_cap(1024, Some(20_000)), 1024);
        assert_eq!(effective_cap(1024, Some(1024)), 768);
        assert_eq!(effective_cap(1024, Some(100)), 16);
        assert_eq!(effective_cap(1024, None), 1024);
    }
}
