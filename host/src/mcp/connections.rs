//! The HTTP server's connections, bounded so a stranger cannot starve it (slowloris).
//!
//! axum's own `serve` accepts every connection and gives none a deadline to send its
//! request head: a thousand clients trickling header bytes hold the process at its
//! file-descriptor limit and nobody else gets in. Here each connection is served by hyper
//! with a header read timeout (it also bounds a kept-alive connection's idle wait for its
//! next request), and the connections are counted, in total and per peer address, under
//! caps kept below the process's file-descriptor limit.
//!
//! At a cap, a new connection is not refused while an older one is *waiting*: a connection
//! with no request in flight that has had at least [`EVICT_GRACE`] to send one (a client
//! writes its head at once; only a slow or idle one is still waiting) is closed to make
//! room, the oldest first. So a flood of trickling connections churns among itself while a
//! client that sends its request promptly is served. Only when every connection has a
//! request running, or all are new, is the new one closed unserved.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;

use super::poll_again::PollAgain;

/// How long a waiting connection is safe from eviction: a client's request head arrives
/// with (or right after) the handshake's last packet, so a connection still waiting for
/// one after this, while the server is full, is slow or idle. Short, because a flood that
/// reconnects as fast as it is closed keeps every slot young.
pub const EVICT_GRACE: Duration = Duration::from_millis(10);

/// How the connections are bounded (from [`super::http::HttpOptions`]).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_total: usize,
    pub max_per_peer: usize,
    /// Longest wait for a request head: from the connection's start, or from the end of
    /// the previous answer on a kept-alive connection, to the head's last byte.
    pub header_timeout: Duration,
}

impl ConnectionLimits {
    /// `max_total` lowered to fit the process's open-file limit: half of it, the rest left
    /// for the audit log, the stores and the guests' files.
    pub fn fitted(mut self) -> ConnectionLimits {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 && limit.rlim_cur != libc::RLIM_INFINITY {
            let room = (limit.rlim_cur as usize / 2).max(8);
            self.max_total = self.max_total.min(room);
        }
        self.max_per_peer = self.max_per_peer.clamp(1, self.max_total.max(1));
        self
    }
}

struct Entry {
    peer: IpAddr,
    started: Instant,
    /// Requests being answered on it now.
    requests: usize,
    close: CancellationToken,
}

/// Every open connection, by id.
#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Entry>,
}

/// The connection table shared by the accept loop and the connections' services.
#[derive(Clone)]
pub struct Connections {
    limits: ConnectionLimits,
    table: Arc<Mutex<Table>>,
}

/// One admitted connection: its id and the token that closes it. Leaves the table when dropped.
pub struct Admitted {
    id: u64,
    pub close: CancellationToken,
    connections: Connections,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.connections.lock().open.remove(&self.id);
    }
}

impl Connections {
    pub fn new(limits: ConnectionLimits) -> Connections {
        Connections { limits, table: Arc::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make room for a connection from `peer` (closing the oldest waiting one where a cap
    /// is reached); `None` if there is none to close.
    pub fn admit(&self, peer: IpAddr) -> Option<Admitted> {
        let mut table = self.lock();
        let now = Instant::now();
        let evictable = |e: &Entry| e.requests == 0 && now.duration_since(e.started) >= EVICT_GRACE;
        let from_peer = table.open.values().filter(|e| e.peer == peer).count();
        if from_peer >= self.limits.max_per_peer {
            let oldest = table.open.iter().find(|(_, e)| e.peer == peer && evictable(e)).map(|(id, _)| *id);
            let entry = table.open.remove(&oldest?)?;
            entry.close.cancel();
        } else if table.open.len() >= self.limits.max_total {
            let oldest = table.open.iter().find(|(_, e)| evictable(e)).map(|(id, _)| *id);
            let entry = table.open.remove(&oldest?)?;
            entry.close.cancel();
        }
        let id = table.next;
        table.next += 1;
        let close = CancellationToken::new();
        table.open.insert(id, Entry { peer, started: now, requests: 0, close: close.clone() });
        Some(Admitted { id, close, connections: self.clone() })
    }

    /// A request is being answered on connection `id`: it may not be evicted until the
    /// returned guard is dropped (the answer's end).
    fn busy(&self, id: u64) -> Busy {
        if let Some(e) = self.lock().open.get_mut(&id) {
            e.requests += 1;
        }
        Busy { id, connections: self.clone() }
    }

    /// Connections open now.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.lock().open.len()
    }
}

/// A request in flight on a connection (see [`Connections::busy`]).
struct Busy {
    id: u64,
    connections: Connections,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(e) = self.connections.lock().open.get_mut(&self.id) {
            e.requests = e.requests.saturating_sub(1);
            // The wait for the next request starts now (as hyper's header timeout does).
            e.started = Instant::now();
        }
    }
}

/// Accept connections on `listener` and serve each with `app` until `shutdown`; then close
/// the listening socket (new connections are refused), close idle connections, and return
/// once every open connection has finished its answer and closed. The caller bounds that
/// wait (an SSE stream ends only when its session does).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let connections = Connections::new(limits.fitted());
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        // Reap the connections that ended, so the set holds only open ones.
        while tasks.try_join_next().is_some() {}
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer): (_, SocketAddr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors (or another transient error): wait a little and go on.
                tracing::warn!("cannot accept an MCP connection: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Some(admitted) = connections.admit(peer.ip()) else {
            // Every slot is answering a request or was just opened: this one is closed unserved.
            drop(stream);
            continue;
        };
        // An answer leaves as several small writes (a session's SSE priming event, the message,
        // the last chunk); with Nagle's algorithm on, each write after the first waits for the
        // client's delayed ACK (40 ms on Linux).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY on an MCP connection (its answers may stall): {e}");
        }
        tasks.spawn(serve_one(stream, app.clone(), admitted, connections.clone(), limits, shutdown.clone()));
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

async fn serve_one(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    admitted: Admitted,
    connections: Connections,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let id = admitted.id;
    let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
        let busy = connections.busy(id);
        let app = app.clone();
        async move {
            use tower::ServiceExt as _;
            let response = app.oneshot(request.map(axum::body::Body::new)).await;
            // The connection stays busy until the answer's body has been sent.
            response.map(|r| r.map(|body| axum::body::Body::new(WhileSending { body, _busy: busy })))
        }
    });
    // hyper wakes this task from inside its own poll on every request with a body; followed
    // at once, that wake costs no trip through the scheduler (see `PollAgain`).
    let mut conn = PollAgain::new(
        hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), service),
    );
    tokio::select! {
        _ = &mut conn => {}
        () = admitted.close.cancelled() => {}
        () = shutdown.cancelled() => {
            conn.inner().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// A response body that keeps its connection marked busy until it is done or dropped.
struct WhileSending {
    body: axum::body::Body,
    _busy: Busy,
}

impl http_body::Body for WhileSending {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_peer: usize) -> ConnectionLimits {
        ConnectionLimits { max_total: total, max_per_peer: per_peer, header_timeout: Duration::from_secs(1) }
    }

    #[test]
    fn at_a_cap_the_oldest_waiting_connection_makes_room() {
        let c = Connections::new(limits(2, 2));
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let first = c.admit(a).unwrap();
        let second = c.admit(a).unwrap();
        // Both new: nothing may be closed for a third.
        assert!(c.admit(a).is_none());
        std::thread::sleep(EVICT_GRACE);
        // The second answers a request: the first (waiting) is closed for the third.
        let _busy = c.busy(second.id);
        let third = c.admit(a).unwrap();
        assert!(first.close.is_cancelled() && !second.close.is_cancelled());
        assert_eq!(c.open(), 2);
        drop(third);
        assert_eq!(c.open(), 1);
    }

    #[test]
    fn the_per_peer_cap_closes_only_that_peers_connections() {
        let c = Connections::new(limits(10, 1));
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        let from_a = c.admit(a).unwrap();
        let from_b = c.admit(b).unwrap();
        std::thread::sleep(EVICT_GRACE);
        let _again = c.admit(a).unwrap();
        assert!(from_a.close.is_cancelled() && !from_b.close.is_cancelled());
    }
}
