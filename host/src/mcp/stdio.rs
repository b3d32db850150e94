//! The stdio transport: rmcp serves the protocol, and this module stands between it and the
//! process's standard streams to answer the one request that is most of the traffic, a
//! `tools/call`, on the task that read it.
//!
//! Why: rmcp runs every request on a task of its own, passes the answer back to its service
//! loop over a channel and writes it from a third task. Three task hops per call, and on two
//! workers the last one wakes the other thread: a futex wake and a context switch per call,
//! for a guest call that itself takes ~15 µs. So a `tools/call` of a session that negotiated
//! a revision before 2026-07-28 with `initialize` (what stdio clients do), carrying neither a
//! `_meta` protocol version nor a progress token, is read, run and answered here, by the same
//! [`SkillhostMcp::call`] rmcp's handler runs; the answer is built with rmcp's own types after
//! the same legacy-peer stripping rmcp applies, so its bytes are the ones rmcp would write
//! (tests/mcp.rs compares them). Everything else (the handshake, lists, resources, prompts,
//! notifications, calls with progress, 2026-07-28 requests, lines that do not parse, lines
//! longer than [`LINE_MAX`]) goes to rmcp unchanged over an in-memory pipe, and rmcp's output
//! is copied to stdout whole line by whole line between these answers.
//!
//! A call runs on this task while no other call is in flight (a guest gives the task back at
//! every 10 ms epoch tick, so input, cancellations and rmcp's output keep moving); one arriving
//! while another runs gets a task of its own, so a pipelining client still has both workers.
//! A call that panics is not answered and does not end the session (as under rmcp).
//! `notifications/cancelled` naming a call answered here cancels it and drops its answer (as
//! rmcp does with its own), and is passed on to rmcp too. At end of input the calls in flight
//! get rmcp's 5 s to answer, then are cancelled; they still write their audit lines, and
//! those that outlast the cancellation are left to `McpServer::drain_calls`'s limit. Nothing
//! here blocks on one stream: both outputs are buffers written as the pipes take them, and
//! stdin is not read while either buffer is over [`HIGH_WATER`] (a client that never reads
//! is not buffered for without bound).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bytes::{Buf, BytesMut};
use futures::FutureExt as _;
use futures::stream::{FuturesUnordered, StreamExt};
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientNotification, Implementation, JsonRpcMessage,
    JsonRpcNotification, ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::Peer;
use rmcp::{RoleServer, ServiceExt as _};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio_util::codec::{Decoder, FramedRead};
use tokio_util::sync::CancellationToken;

use super::request::{ToolsCall, contains, tools_call, tools_call_of};
use super::{CallContext, McpServer, SkillhostMcp, Transport, client_from};

/// Longest client line looked at here; a longer one goes to rmcp as it arrives.
const LINE_MAX: usize = 1 << 20;
/// Output held for a client that is not reading before stdin is no longer read (a bound on
/// memory, high enough for a client that writes many requests before it reads an answer).
const HIGH_WATER: usize = 64 << 20;
/// Capacity of each in-memory pipe to and from rmcp.
const PIPE_BUF: usize = 1 << 16;
/// Longest the front stops reading after passing on `notifications/initialized`, waiting for
/// rmcp to finish the handshake (see [`Front::handshake_pause`]).
const HANDSHAKE_PAUSE: Duration = Duration::from_secs(1);
/// What rmcp gives its own handlers at end of input before it cancels them.
const END_OF_INPUT_GRACE: Duration = Duration::from_secs(5);

/// Serve one client over stdin/stdout until it closes the stream.
pub async fn serve(server: Arc<McpServer>) -> Result<()> {
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let handler = server.connection(Transport::Stdio);
    let (to_rmcp, rmcp_reads) = tokio::io::duplex(PIPE_BUF);
    let (rmcp_writes, from_rmcp) = tokio::io::duplex(PIPE_BUF);
    let (peer_tx, peer_rx) = tokio::sync::oneshot::channel();
    let rmcp_side = handler.clone();
    let rmcp_task = tokio::spawn(async move {
        let running = rmcp_side
            .serve((rmcp_reads, rmcp_writes))
            .await
            .map_err(|e| anyhow::anyhow!("MCP stdio session failed to start: {e}"))?;
        // Only a session opened with `initialize` has its calls answered by the front: one
        // opened inline keeps requiring per-request metadata even after a late `initialize`.
        if running.peer().peer_info().is_some() {
            let _ = peer_tx.send(running.peer().clone());
        }
        // On end of input rmcp lets running calls answer for a while, then cancels them;
        // they still write their audit lines, which the exit waits for.
        running.waiting().await?;
        anyhow::Ok(())
    });
    // On a worker, not on the thread that waits for the whole session: the worker that finds
    // stdin readable in its own poll of the reactor runs the call itself, where the waiting
    // thread would be woken across threads for every line.
    let front = tokio::spawn(Front::new(handler).run(stdin, stdout, to_rmcp, from_rmcp, peer_rx)).await;
    let session = rmcp_task.await;
    // Whatever ended the session, the calls still running get their audit lines and what was
    // written is synced.
    server.drain_calls().await;
    let finished = server.finish();
    front.map_err(|e| anyhow::anyhow!("the MCP stdio transport failed: {e}"))?;
    session.map_err(|e| anyhow::anyhow!("the MCP stdio session failed: {e}"))??;
    finished
}

/// A piece of input: a whole line (with its `\n`), or part of one too long to look at.
struct Piece {
    bytes: BytesMut,
    whole: bool,
}

/// Splits a stream into lines; past `max` without a newline, hands the line on in pieces.
struct Lines {
    max: usize,
    /// Inside a line already handed on in pieces.
    in_long_line: bool,
    /// Where the newline search resumes.
    searched: usize,
}

impl Lines {
    fn new(max: usize) -> Lines {
        Lines { max, in_long_line: false, searched: 0 }
    }
}

impl Decoder for Lines {
    type Item = Piece;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Piece>> {
        let newline = buf[self.searched..].iter().position(|b| *b == b'\n').map(|at| self.searched + at);
        match newline {
            Some(at) => {
                self.searched = 0;
                let whole = !std::mem::take(&mut self.in_long_line);
                Ok(Some(Piece { bytes: buf.split_to(at + 1), whole }))
            }
            None if buf.len() > self.max || (self.in_long_line && !buf.is_empty()) => {
                self.searched = 0;
                self.in_long_line = true;
                Ok(Some(Piece { bytes: buf.split(), whole: false }))
            }
            None => {
                self.searched = buf.len();
                Ok(None)
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> std::io::Result<Option<Piece>> {
        match self.decode(buf)? {
            Some(piece) => Ok(Some(piece)),
            // An unterminated last line: rmcp decides what it is.
            None if !buf.is_empty() => {
                self.searched = 0;
                Ok(Some(Piece { bytes: buf.split(), whole: false }))
            }
            None => Ok(None),
        }
    }
}

/// A client line the front acts on itself.
// Returned once per line and consumed at once, never stored: boxing the call would add an
// allocation per call for nothing.
#[allow(clippy::large_enum_variant)]
enum Taken {
    /// A `tools/call` answered here, for the session `peer`.
    Call { peer: Peer<RoleServer>, id: RequestId, params: CallToolRequestParams, named: Option<Implementation> },
    /// `notifications/cancelled` (passed on to rmcp as well).
    Cancel(Option<RequestId>),
}

/// What a call answered here ends with: its id and the answer to write, if any.
type Answering = Pin<Box<dyn Future<Output = (RequestId, Option<ServerJsonRpcMessage>)> + Send>>;

/// The loop between the process's streams and rmcp.
struct Front {
    handler: SkillhostMcp,
    /// Known once rmcp has finished the handshake.
    peer: Option<Peer<RoleServer>>,
    calls: FuturesUnordered<Answering>,
    /// Calls answered here and not cancelled; a call whose id is no longer here is not answered.
    live: HashMap<RequestId, CancellationToken>,
    to_stdout: BytesMut,
    to_rmcp: BytesMut,
    /// Set when `notifications/initialized` went to rmcp before the peer was known: stdin is
    /// not read until rmcp hands the peer over (or this passes), so that a call the client
    /// sends right after it is answered here like every later one, not left to rmcp by a race.
    handshake_pause: Option<tokio::time::Instant>,
}

impl Front {
    fn new(handler: SkillhostMcp) -> Front {
        Front {
            handler,
            peer: None,
            calls: FuturesUnordered::new(),
            live: HashMap::new(),
            to_stdout: BytesMut::new(),
            to_rmcp: BytesMut::new(),
            handshake_pause: None,
        }
    }

    async fn run(
        mut self,
        stdin: impl AsyncRead + Unpin,
        mut stdout: impl AsyncWrite + Unpin,
        mut rmcp_in: DuplexStream,
        rmcp_out: DuplexStream,
        mut peer_rx: tokio::sync::oneshot::Receiver<Peer<RoleServer>>,
    ) {
        let mut input = FramedRead::new(stdin, Lines::new(LINE_MAX));
        // rmcp's output is ours: whole lines of any length.
        let mut output = FramedRead::new(rmcp_out, Lines::new(usize::MAX));
        let mut input_open = true;
        let mut rmcp_in_open = true;
        let mut output_open = true;
        let mut stdout_ok = true;
        let mut stdout_dirty = false;
        let mut peer_pending = true;
        let mut grace_ends: Option<tokio::time::Instant> = None;
        let mut grace_over = false;
        loop {
            if !stdout_ok {
                // The client is gone: what it would have read is dropped, the calls still run
                // to their audit lines.
                self.to_stdout.clear();
                stdout_dirty = false;
            }
            if !input_open && rmcp_in_open && self.to_rmcp.is_empty() {
                // End of input reaches rmcp once everything before it has.
                let _ = rmcp_in.shutdown().await;
                rmcp_in_open = false;
            }
            let closed = !input_open && !rmcp_in_open && !output_open;
            if closed && grace_over && !self.calls.is_empty() {
                // Cancelled calls that still have not ended (a memory tool's blocking work, a
                // store round trip): they go on on their own tasks, and the exit waits for them
                // only as long as `McpServer::drain_calls` does, as for rmcp's own.
                for call in std::mem::take(&mut self.calls) {
                    tokio::spawn(call);
                }
            }
            if closed && self.calls.is_empty() && (self.to_stdout.is_empty() && !stdout_dirty) {
                return;
            }
            let room = self.to_stdout.len() < HIGH_WATER && self.to_rmcp.len() < HIGH_WATER;
            let paused = peer_pending && self.handshake_pause.is_some();
            tokio::select! {
                biased;
                written = write_some(&mut stdout, &self.to_stdout), if stdout_ok && (stdout_dirty || !self.to_stdout.is_empty()) => match written {
                    Ok(Some(0)) | Err(_) => stdout_ok = false,
                    Ok(Some(n)) => {
                        self.to_stdout.advance(n);
                        stdout_dirty = true;
                    }
                    Ok(None) => stdout_dirty = false,
                },
                written = rmcp_in.write(&self.to_rmcp), if rmcp_in_open && !self.to_rmcp.is_empty() => match written {
                    Ok(n) if n > 0 => self.to_rmcp.advance(n),
                    // rmcp has stopped reading: it has ended the session.
                    _ => {
                        self.to_rmcp.clear();
                        rmcp_in_open = false;
                    }
                },
                Some((id, answer)) = self.calls.next(), if !self.calls.is_empty() => {
                    if self.live.remove(&id).is_some()
                        && let Some(answer) = answer
                    {
                        encode(&answer, &mut self.to_stdout);
                    }
                },
                line = output.next(), if output_open && self.to_stdout.len() < HIGH_WATER => match line {
                    Some(Ok(piece)) => self.to_stdout.extend_from_slice(&piece.bytes),
                    // rmcp has ended the session (end of input, or a handshake that failed):
                    // nothing more is read.
                    _ => {
                        output_open = false;
                        if input_open {
                            input_open = false;
                            grace_ends = Some(tokio::time::Instant::now() + END_OF_INPUT_GRACE);
                        }
                    }
                },
                peer = &mut peer_rx, if peer_pending => {
                    peer_pending = false;
                    self.peer = peer.ok();
                    self.handshake_pause = None;
                },
                _ = sleep_until(self.handshake_pause), if paused => self.handshake_pause = None,
                piece = input.next(), if input_open && room && !paused => match piece {
                    Some(Ok(piece)) => self.take(piece),
                    // End of input, or a read error (the client is gone either way).
                    _ => {
                        input_open = false;
                        grace_ends = Some(tokio::time::Instant::now() + END_OF_INPUT_GRACE);
                    }
                },
                _ = sleep_until(grace_ends), if grace_ends.is_some() && !grace_over && !self.calls.is_empty() => {
                    // As rmcp does with its own: the calls still running are cancelled and
                    // not answered; each still writes its audit line.
                    grace_over = true;
                    for (_, cancel) in self.live.drain() {
                        cancel.cancel();
                    }
                },
            }
        }
    }

    /// A piece of client input: a call answered here, a cancellation of one, or for rmcp.
    fn take(&mut self, piece: Piece) {
        if self.peer.is_none() && piece.whole && is_initialized(&piece.bytes) {
            self.handshake_pause = Some(tokio::time::Instant::now() + HANDSHAKE_PAUSE);
        }
        match self.answerable(&piece) {
            Some(Taken::Call { peer, id, params, named }) => return self.start_call(peer, id, params, named),
            // rmcp hears of it too: should the client have reused the id for a request rmcp
            // serves, that one is cancelled as well, as with rmcp alone.
            Some(Taken::Cancel(id)) => {
                if let Some(cancel) = id.and_then(|id| self.live.remove(&id)) {
                    cancel.cancel();
                }
            }
            None => {}
        }
        self.to_rmcp.extend_from_slice(&piece.bytes);
    }

    /// What the front does with a whole line itself, if anything; `None` leaves it to rmcp.
    fn answerable(&self, piece: &Piece) -> Option<Taken> {
        if !piece.whole {
            return None;
        }
        // What rmcp would answer the legacy way: a session opened with `initialize` (rmcp
        // keeps no peer info for one opened inline) at a revision before 2026-07-28.
        let peer = self.peer.as_ref()?;
        if peer.peer_info()?.protocol_version.as_str() >= ProtocolVersion::V_2026_07_28.as_str() {
            return None;
        }
        // Most lines are neither; they are not parsed twice.
        let line = &piece.bytes[..];
        if !contains(line, b"\"tools/call\"") && !contains(line, b"\"notifications/cancelled\"") {
            return None;
        }
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // A call read straight, else rmcp's parse (once) for a call or a cancellation.
        let call = match tools_call(line) {
            Some(call) => call,
            None => match tools_call_of(serde_json::from_slice::<ClientJsonRpcMessage>(line).ok()?) {
                Ok(call) => call,
                Err(other) => {
                    return match *other {
                        JsonRpcMessage::Notification(JsonRpcNotification {
                            notification: ClientNotification::CancelledNotification(cancelled),
                            ..
                        }) => Some(Taken::Cancel(cancelled.params.request_id)),
                        _ => None,
                    };
                }
            },
        };
        let ToolsCall { id, params, meta } = call;
        if meta.protocol_version().is_some() || meta.get_progress_token().is_some() {
            return None;
        }
        Some(Taken::Call { peer: peer.clone(), id, params, named: meta.client_info() })
    }

    fn start_call(
        &mut self,
        peer: Peer<RoleServer>,
        id: RequestId,
        params: CallToolRequestParams,
        named: Option<Implementation>,
    ) {
        tracing::debug!(%id, "tools/call answered by the stdio transport");
        let cancel = CancellationToken::new();
        self.live.insert(id.clone(), cancel.clone());
        let handler = self.handler.clone();
        let unanswered = id.clone();
        let answer = async move {
            let client = client_from(named, &peer);
            let call = CallContext { client, cancelled: &cancel, progress: None };
            let answer = match handler.call(params, call).await {
                Ok(response) => {
                    let mut result = ServerResult::from(response);
                    result.strip_result_type_for_legacy_peer();
                    result.strip_non_object_output_for_legacy_peer();
                    JsonRpcMessage::response(result, id.clone())
                }
                Err(error) => JsonRpcMessage::error(error, Some(id.clone())),
            };
            (id, Some(answer))
        };
        // A call that panics has no answer (nor would it under rmcp) and must not end the
        // session.
        let answer = std::panic::AssertUnwindSafe(answer).catch_unwind().map({
            let unanswered = unanswered.clone();
            move |done| done.unwrap_or((unanswered, None))
        });
        if self.calls.is_empty() {
            // The common case, one call at a time: run it on this task.
            self.calls.push(Box::pin(answer));
        } else {
            let running = tokio::spawn(answer);
            self.calls.push(Box::pin(running.map(move |done| done.unwrap_or((unanswered, None)))));
        }
    }
}

/// Some of `buf` written, or with nothing left to write, the stream flushed (`None`).
async fn write_some(out: &mut (impl AsyncWrite + Unpin), buf: &[u8]) -> std::io::Result<Option<usize>> {
    if buf.is_empty() {
        out.flush().await?;
        Ok(None)
    } else {
        out.write(buf).await.map(Some)
    }
}

/// A message as rmcp's codec writes it: its JSON and a newline.
fn encode(message: &ServerJsonRpcMessage, out: &mut BytesMut) {
    match serde_json::to_vec(message) {
        Ok(json) => {
            out.extend_from_slice(&json);
            out.extend_from_slice(b"\n");
        }
        Err(e) => tracing::error!("cannot encode an MCP answer: {e}"),
    }
}

/// Whether `line` is the client's `notifications/initialized` (parsed only if it may be).
fn is_initialized(line: &[u8]) -> bool {
    contains(line, b"notifications/initialized")
        && serde_json::from_slice::<serde_json::Value>(line)
            .is_ok_and(|v| v.get("method").and_then(|m| m.as_str()) == Some("notifications/initialized"))
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
