//! The owner's socket, `memory/store.sock`: the process that owns the store serves every
//! [`Request`] of the other processes of the same user, one thread per connection, with
//! the same table of operations ([`super::ops`]) its own callers use. Frames are a 4-byte big-endian length
//! and a JSON body; an answer is `{"ok": value}` or `{"err": "message"}`.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};

use serde_json::{Value, json};

use super::ops::{Hello, Request};
use super::replica::Replica;
use super::store::{Store, classify, damaged, panic_message};

/// Largest frame either side accepts (an `import` of a big export is the largest).
const MAX_FRAME: usize = 512 << 20;
/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 256;

/// Run `f` on the store, turning a redb panic or corruption error into "store damaged".
pub(super) fn guarded<T>(store: &Store, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(store))) {
        Ok(result) => result.map_err(|e| classify(&store.path, e)),
        Err(panic) => Err(damaged(&store.path, &format!("redb: {}", panic_message(&*panic)))),
    }
}

fn write_frame(w: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(body.len()).map_err(|_| std::io::Error::other("memory request too large"))?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// The next frame, or `None` at a clean end of stream.
fn read_frame(r: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!("memory frame of {len} bytes is over the limit of {MAX_FRAME}")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

/// The uid of the process at the other end (connections from other users are refused).
fn peer_uid(s: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, which is that large.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(cred.uid)
}

/// The connections an owner is serving, with the thread serving each.
type OpenConnections = Arc<Mutex<Vec<(UnixStream, JoinHandle<()>)>>>;

/// The owner's side: accepts connections until stopped.
pub(super) struct Server {
    path: PathBuf,
    listener: UnixListener,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    connections: OpenConnections,
}

/// Bind `path` (the lock holder calls this, so a socket file there is a dead owner's).
pub(super) fn bind(path: &Path) -> Result<UnixListener> {
    let _ = std::fs::remove_file(path);
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot serve the memory store on {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", path.display()))?;
    Ok(listener)
}

impl Server {
    pub fn start(
        listener: UnixListener,
        path: PathBuf,
        store: Arc<Store>,
        replica: Option<Arc<Replica>>,
    ) -> Result<Server> {
        let stop = Arc::new(AtomicBool::new(false));
        let connections: OpenConnections = Arc::new(Mutex::new(Vec::new()));
        let accepting = listener.try_clone().context("cannot serve the memory store")?;
        let (stop2, conns2) = (stop.clone(), connections.clone());
        let accept = std::thread::Builder::new()
            .name("memory-owner".into())
            .spawn(move || accept_loop(accepting, store, replica, stop2, conns2))
            .context("cannot start the memory store server")?;
        Ok(Server { path, listener, stop, accept: Some(accept), connections })
    }

    /// Stop accepting, close every connection (clients reconnect or take over), remove the socket.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // SAFETY: shutdown on a descriptor we own wakes the thread blocked in accept.
        unsafe {
            libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR);
        }
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let conns = std::mem::take(&mut *self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for (stream, _) in &conns {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        for (_, t) in conns {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(
    listener: UnixListener,
    store: Arc<Store>,
    replica: Option<Arc<Replica>>,
    stop: Arc<AtomicBool>,
    connections: OpenConnections,
) {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else {
            // Out of descriptors or similar: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if peer_uid(&stream) != Some(me) {
            continue;
        }
        let mut conns = connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        conns.retain(|(_, t)| !t.is_finished());
        if conns.len() >= MAX_CONNECTIONS {
            continue;
        }
        let Ok(handle) = stream.try_clone() else { continue };
        let (store, replica) = (store.clone(), replica.clone());
        if let Ok(t) = std::thread::Builder::new()
            .name("memory-client".into())
            .spawn(move || handle_connection(stream, &store, replica.as_deref()))
        {
            conns.push((handle, t));
        }
    }
}

fn handle_connection(mut stream: UnixStream, store: &Store, replica: Option<&Replica>) {
    while let Ok(Some(frame)) = read_frame(&mut stream) {
        let answer = match serde_json::from_slice::<Request>(&frame) {
            Ok(req) => guarded(store, |s| super::replica::serve(replica, s, req)),
            Err(e) => Err(anyhow!("not a memory request: {e}")),
        };
        let body = match answer {
            Ok(v) => json!({ "ok": v }),
            Err(e) => json!({ "err": format!("{e:#}") }),
        };
        let Ok(body) = serde_json::to_vec(&body) else { return };
        if write_frame(&mut stream, &body).is_err() {
            return;
        }
    }
}

/// Why a call to the owner failed.
pub(super) enum CallError {
    /// The request never reached an owner (gone, or not yet serving): safe to retry.
    NotSent(std::io::Error),
    /// Sent, but the owner went away before answering: it may or may not have run.
    Lost(std::io::Error),
    /// The owner ran it and it failed.
    Failed(anyhow::Error),
}

/// A process that does not own the store: every operation is a request to the owner.
pub(super) struct Client {
    path: PathBuf,
    idle: Mutex<Vec<UnixStream>>,
    pub owner_pid: u32,
}

impl Client {
    /// Connect to the owner serving on `path` and check that it answers within `wait`.
    pub fn connect(path: &Path, wait: Duration) -> std::io::Result<Client> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(wait.max(Duration::from_secs(1)) + Duration::from_secs(30)))?;
        let client = Client { path: path.to_path_buf(), idle: Mutex::new(vec![stream]), owner_pid: 0 };
        let hello = match client.call(&Request::from(Hello {})) {
            Ok(v) => v,
            Err(CallError::NotSent(e) | CallError::Lost(e)) => return Err(e),
            Err(CallError::Failed(e)) => return Err(std::io::Error::other(format!("{e:#}"))),
        };
        let owner_pid = hello.get("pid").and_then(Value::as_u64).unwrap_or(0) as u32;
        if let Some(s) = client.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).first() {
            s.set_read_timeout(None)?;
        }
        Ok(Client { owner_pid, ..client })
    }

    pub fn call(&self, req: &Request) -> Result<Value, CallError> {
        let pooled = self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let mut stream = match pooled {
            Some(s) => s,
            None => UnixStream::connect(&self.path).map_err(CallError::NotSent)?,
        };
        let body = serde_json::to_vec(req).map_err(|e| CallError::Failed(e.into()))?;
        // A dead owner's socket refuses the write (EPIPE): nothing was sent.
        write_frame(&mut stream, &body).map_err(CallError::NotSent)?;
        let frame = match read_frame(&mut stream) {
            Ok(Some(f)) => f,
            Ok(None) => return Err(CallError::Lost(std::io::ErrorKind::UnexpectedEof.into())),
            Err(e) => return Err(CallError::Lost(e)),
        };
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(stream);
        let mut answer: Value = serde_json::from_slice(&frame)
            .map_err(|e| CallError::Failed(anyhow!("the memory store owner sent a bad answer: {e}")))?;
        if let Some(err) = answer.get("err").and_then(Value::as_str) {
            return Err(CallError::Failed(anyhow!("{err}")));
        }
        Ok(answer.get_mut("ok").map(Value::take).unwrap_or(Value::Null))
    }
}
