//! The 2025-11-25 sessions rmcp has opened, as the direct path ([`super::direct`]) needs them.
//!
//! Why: under rmcp a session's `tools/call` goes from the connection's task to the session's
//! worker, its service loop, a handler task of its own, and back over a request-wise channel
//! as an SSE stream: four tasks and their hand-offs around a guest call of ~15 µs. The direct
//! path answers it on the connection's task with the session's own handler (so the audit
//! session, the client's name and its capabilities are the session's), and for that it needs
//! to know which sessions exist and which handler serves each.
//!
//! - A session is entered when its client sends `notifications/initialized`: the handler sees
//!   the `Mcp-Session-Id` that request carried ([`Sessions::open`]). rmcp hands the handler
//!   that notification a moment after it answered its POST, so a call sent at once may still
//!   take rmcp's path; a client that never sends it stays there.
//! - It is found only while rmcp still has it ([`Sessions::find`]), so a request for a session
//!   that was closed (`DELETE`) or expired gets rmcp's 404, and only while it speaks a revision
//!   before 2026-07-28 (whose answers the direct path shapes as rmcp does for a session).
//! - rmcp ends a session its worker has heard nothing of for a while; a call answered here
//!   never reaches that worker, so finding a session tells its worker it is in use (a
//!   notification the handler ignores), at most every fifth of `--session-idle-secs`. rmcp's
//!   own limit is set a fifth longer, so a session ends between the idle time and 1.2 times it
//!   after its last request, never sooner.
//! - Every [`SWEEP_EVERY`] the sessions whose service has ended (closed with `DELETE`, or
//!   expired) are dropped, and the calls still running in them on this path are cancelled,
//!   as rmcp cancels its own when a session ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ProtocolVersion};
use rmcp::service::Peer;
use rmcp::transport::streamable_http_server::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::super::SkillhostMcp;

/// The sessions the direct path may answer for, by `Mcp-Session-Id`.
pub(crate) struct Sessions {
    manager: Arc<LocalSessionManager>,
    /// This table, for the sweep started with the first session.
    me: Weak<Sessions>,
    sweeping: AtomicBool,
    open: Mutex<HashMap<String, Arc<Session>>>,
    /// How often, at most, a session in use over the direct path is made known to its worker.
    tell_in_use_every: Duration,
}

/// One session: the handler rmcp serves it with, and the client as `initialize` named it.
pub(crate) struct Session {
    pub(crate) handler: SkillhostMcp,
    pub(crate) peer: Peer<RoleServer>,
    told_in_use: Mutex<Instant>,
}

/// The notification that tells a session's worker the session is in use. Not a method of MCP:
/// rmcp hands it to the handler's `on_custom_notification`, which does nothing with it.
const IN_USE: &str = r#"{"jsonrpc":"2.0","method":"notifications/skillhost/session-in-use"}"#;

/// How often ended sessions are dropped and their calls on the direct path cancelled.
const SWEEP_EVERY: Duration = Duration::from_secs(2);

impl Sessions {
    /// The sessions of `manager` (rmcp's), which a session's client keeps open by sending a
    /// request at least every `idle`. The sweep starts with the first session (entered on
    /// the server's runtime) and ends when the table is dropped.
    pub(crate) fn start(manager: Arc<LocalSessionManager>, idle: Duration) -> Arc<Sessions> {
        Arc::new_cyclic(|me| Sessions {
            manager,
            me: me.clone(),
            sweeping: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            tell_in_use_every: idle / 5,
        })
    }

    /// The time rmcp is to give a session without a request: a fifth longer than `idle`, as
    /// the in-use notice goes at most every fifth of `idle` (see the module doc).
    pub(crate) fn rmcp_idle(idle: Duration) -> Duration {
        idle + idle / 5
    }

    /// Enter session `id`, served by `handler`, whose client is `peer` (once: a repeated
    /// `notifications/initialized` changes nothing).
    pub(crate) fn open(&self, id: &str, handler: SkillhostMcp, peer: Peer<RoleServer>) {
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            tokio::spawn(sweep(self.me.clone()));
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.entry(id.to_string())
            .or_insert_with(|| Arc::new(Session { handler, peer, told_in_use: Mutex::new(Instant::now()) }));
    }

    /// Drop the sessions whose service has ended, and cancel their calls on this path.
    fn sweep_ended(&self) {
        let ended: Vec<Arc<Session>> = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<String> =
                open.iter().filter(|(_, s)| s.peer.is_transport_closed()).map(|(id, _)| id.clone()).collect();
            ids.iter().filter_map(|id| open.remove(id)).collect()
        };
        for session in ended {
            session.handler.cancel_direct_calls();
        }
    }

    /// Session `id`, if the direct path may answer for it: rmcp still has it and it speaks a
    /// revision before 2026-07-28.
    pub(crate) async fn find(&self, id: &str) -> Option<Arc<Session>> {
        let session = self.open.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned()?;
        let session_id: rmcp::transport::streamable_http_server::SessionId = id.into();
        if !self.manager.has_session(&session_id).await.unwrap_or(false) {
            // Ended (closed, expired): its calls here end with it, as the sweep would end them.
            let ended = self.open.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
            if let Some(ended) = ended {
                ended.handler.cancel_direct_calls();
            }
            return None;
        }
        if session.peer.is_transport_closed() {
            return None;
        }
        let legacy = session
            .peer
            .peer_info()
            .is_some_and(|info| info.protocol_version.as_str() < ProtocolVersion::V_2026_07_28.as_str());
        if !legacy {
            return None;
        }
        self.tell_in_use(session_id, &session);
        Some(session)
    }

    fn tell_in_use(&self, id: rmcp::transport::streamable_http_server::SessionId, session: &Session) {
        {
            let mut told = session.told_in_use.lock().unwrap_or_else(|e| e.into_inner());
            if told.elapsed() < self.tell_in_use_every {
                return;
            }
            *told = Instant::now();
        }
        let Ok(message) = serde_json::from_str::<ClientJsonRpcMessage>(IN_USE) else { return };
        let manager = self.manager.clone();
        tokio::spawn(async move {
            // Gone already: then the next request is rmcp's 404 anyway.
            let _ = manager.accept_message(&id, message).await;
        });
    }
}

async fn sweep(sessions: Weak<Sessions>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(sessions) = sessions.upgrade() else { return };
        sessions.sweep_ended();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_use_notice_is_a_notification_rmcp_reads() {
        let message = serde_json::from_str::<ClientJsonRpcMessage>(IN_USE).expect("rmcp parses it");
        assert!(matches!(message, ClientJsonRpcMessage::Notification(_)), "{message:?}");
    }
}
