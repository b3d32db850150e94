//! # skillhost-sdk: write a skillhost skill in Rust
//!
//! A skill is one type implementing [`Skill`] plus one [`export_skill!`] line. The SDK
//! hides the WIT bindings: parameters arrive as your own `serde` type (the host has
//! already validated them against SKILL.md), and you return a [`SkillResult`] built with
//! its small builder, or a [`SkillError`].
//!
//! ```ignore
//! use serde::Deserialize;
//! use skillhost_sdk::{export_skill, Context, Skill, SkillError, SkillResult};
//!
//! #[derive(Deserialize)]
//! struct Params { name: String }
//!
//! struct Greet;
//!
//! impl Skill for Greet {
//!     type Params = Params;
//!     fn execute(p: Params, ctx: &Context) -> Result<SkillResult, SkillError> {
//!         ctx.info(&format!("greeting {}", p.name));
//!         Ok(SkillResult::success(format!("hello, {}", p.name)).meta("length", p.name.len()))
//!     }
//! }
//!
//! export_skill!(Greet);
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2 --release`; the `.wasm` file cargo
//! writes is the component to ship next to SKILL.md as `skill.wasm`.
//!
//! Tip: most of a warm call's cost is the memory pages it touches, and rustc gives wasm
//! programs a 1 MiB stack. Unless the skill recurses deeply, link with a smaller one
//! (`.cargo/config.toml`: `[target.wasm32-wasip2] rustflags = ["-C",
//! "link-arg=-zstack-size=262144"]`); on skillhost's benchmark that takes a trivial call
//! from ~37 µs to ~24 µs.

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "skill",
        pub_export_macro: true,
        default_bindings_module: "skillhost_sdk::bindings",
        export_macro_name: "__export_skill_world",
    });
}

use bindings::skillhost::skill::{log as wit_log, memory as wit_memory, session as wit_session, types as wit};

pub use bindings::skillhost::skill::types::{MemoryHit, MemoryKind, Status};

/// Parameters and the host, for one call.
pub struct Context {
    session_id: String,
    step: u32,
}

/// A failed host call: the capability is missing, the input was refused, or the host is
/// unavailable. Its `Display` is a sentence fit for the model.
#[derive(Debug, Clone, PartialEq)]
pub enum HostError {
    /// The skill lacks the capability; the message names it.
    Denied(String),
    /// The host refused the arguments.
    InvalidInput(String),
    /// The host could not complete the call.
    Unavailable(String),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Denied(m) => write!(f, "denied: {m}"),
            HostError::InvalidInput(m) => write!(f, "invalid input: {m}"),
            HostError::Unavailable(m) => write!(f, "host unavailable: {m}"),
        }
    }
}

impl std::error::Error for HostError {}

impl From<wit::HostError> for HostError {
    fn from(e: wit::HostError) -> Self {
        match e {
            wit::HostError::Denied(m) => HostError::Denied(m),
            wit::HostError::InvalidInput(m) => HostError::InvalidInput(m),
            wit::HostError::Unavailable(m) => HostError::Unavailable(m),
        }
    }
}

impl From<HostError> for SkillError {
    fn from(e: HostError) -> Self {
        SkillError::Failed(e.to_string())
    }
}

impl Context {
    /// The agent session this call belongs to.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The step number in the agent loop (0 when run directly).
    pub fn step(&self) -> u32 {
        self.step
    }

    /// Long-term memory records relevant to `query` (needs `memory: read`).
    pub fn memory_search(&self, query: &str, limit: u32) -> Result<Vec<MemoryHit>, HostError> {
        wit_memory::search(query, limit).map_err(Into::into)
    }

    /// A value from session working memory (needs `session`).
    pub fn session_get(&self, key: &str) -> Result<Option<String>, HostError> {
        wit_session::get(key).map_err(Into::into)
    }

    /// Store a value in session working memory (needs `session`).
    pub fn session_set(&self, key: &str, value: &str) -> Result<(), HostError> {
        wit_session::set(key, value).map_err(Into::into)
    }

    /// All keys in session working memory (needs `session`).
    pub fn session_keys(&self) -> Result<Vec<String>, HostError> {
        wit_session::keys().map_err(Into::into)
    }

    /// Log a line at `level`; it lands in the call report and the audit log.
    pub fn log(&self, level: Level, message: &str) {
        wit_log::write(level.into(), message)
    }

    /// Log at info level.
    pub fn info(&self, message: &str) {
        self.log(Level::Info, message)
    }

    /// Log at warn level.
    pub fn warn(&self, message: &str) {
        self.log(Level::Warn, message)
    }

    /// Log at debug level.
    pub fn debug(&self, message: &str) {
        self.log(Level::Debug, message)
    }
}

/// Up to 30 entries of the guest directory `dir` (directories marked with `/`), sorted,
/// for error messages that help the model pick a real path: "Files in /workspace: ...".
/// `None` when the directory cannot be read (not mounted, or not a directory).
pub fn dir_listing(dir: &str) -> Option<String> {
    const MAX: usize = 30;
    let rd = std::fs::read_dir(dir).ok()?;
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| {
            let mut n = e.file_name().to_string_lossy().into_owned();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                n.push('/');
            }
            n
        })
        .collect();
    names.sort();
    let more = names.len().saturating_sub(MAX);
    names.truncate(MAX);
    let mut s = names.join(", ");
    if more > 0 {
        s.push_str(&format!(" (+{more} more)"));
    }
    Some(if s.is_empty() { "(empty)".to_string() } else { s })
}

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl From<Level> for wit_log::Level {
    fn from(l: Level) -> Self {
        match l {
            Level::Trace => wit_log::Level::Trace,
            Level::Debug => wit_log::Level::Debug,
            Level::Info => wit_log::Level::Info,
            Level::Warn => wit_log::Level::Warn,
            Level::Error => wit_log::Level::Error,
        }
    }
}

/// A memory the skill proposes to keep. Summarize first: counts and key lines.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    pub kind: MemoryKind,
    pub content: String,
    pub priority: u8,
    pub tags: Vec<String>,
}

impl NewMemory {
    /// A memory of `kind` with priority 2 and no tags.
    pub fn new(kind: MemoryKind, content: impl Into<String>) -> Self {
        NewMemory { kind, content: content.into(), priority: 2, tags: Vec::new() }
    }

    /// A fact about the project or its environment.
    pub fn fact(content: impl Into<String>) -> Self {
        Self::new(MemoryKind::Fact, content)
    }

    /// The outcome of a task.
    pub fn task_result(content: impl Into<String>) -> Self {
        Self::new(MemoryKind::TaskResult, content)
    }

    /// A trap and how to avoid it.
    pub fn pitfall(content: impl Into<String>) -> Self {
        Self::new(MemoryKind::Pitfall, content)
    }

    /// Set the priority (0-5; larger values are clamped to 5).
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority.min(5);
        self
    }

    /// Add a tag.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tags.push(tag.into());
        self
    }
}

/// The result of a call: output for the model, proposed memories, status, metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillResult {
    pub output: String,
    pub new_memories: Vec<NewMemory>,
    pub status: Status,
    pub metadata: Vec<(String, String)>,
}

impl SkillResult {
    fn with_status(status: Status, output: impl Into<String>) -> Self {
        SkillResult { output: output.into(), new_memories: Vec::new(), status, metadata: Vec::new() }
    }

    /// The skill did what was asked.
    pub fn success(output: impl Into<String>) -> Self {
        Self::with_status(Status::Success, output)
    }

    /// The skill ran but could not do what was asked; `output` says why.
    pub fn failure(output: impl Into<String>) -> Self {
        Self::with_status(Status::Failure, output)
    }

    /// The skill needs more input from the user; `question` is what to ask.
    pub fn require_more(question: impl Into<String>) -> Self {
        Self::with_status(Status::RequireMore, question)
    }

    /// Add a metadata entry.
    pub fn meta(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.metadata.push((key.into(), value.to_string()));
        self
    }

    /// Propose a memory.
    pub fn remember(mut self, memory: NewMemory) -> Self {
        self.new_memories.push(memory);
        self
    }
}

/// Why a call produced no result.
#[derive(Debug, Clone, PartialEq)]
pub enum SkillError {
    /// The parameters were wrong; say how to fix the call.
    InvalidParams(String),
    /// Anything else; say what happened.
    Failed(String),
}

impl SkillError {
    /// Shorthand for [`SkillError::InvalidParams`].
    pub fn invalid(message: impl Into<String>) -> Self {
        SkillError::InvalidParams(message.into())
    }

    /// Shorthand for [`SkillError::Failed`].
    pub fn failed(message: impl Into<String>) -> Self {
        SkillError::Failed(message.into())
    }
}

/// A skill: one typed entry point.
pub trait Skill {
    /// The parameters, deserialized from the validated JSON object.
    type Params: serde::de::DeserializeOwned;

    /// Do the work.
    fn execute(params: Self::Params, ctx: &Context) -> Result<SkillResult, SkillError>;
}

/// Glue used by [`export_skill!`]; not part of the public API.
#[doc(hidden)]
pub fn __run<S: Skill>(call: wit::Invocation) -> Result<wit::SkillResult, wit::SkillError> {
    let params: S::Params = serde_json::from_str(&call.params)
        .map_err(|e| wit::SkillError::InvalidParams(format!("parameters do not fit this skill: {e}")))?;
    let ctx = Context { session_id: call.session_id, step: call.step };
    match S::execute(params, &ctx) {
        Ok(r) => Ok(wit::SkillResult {
            output: r.output,
            new_memories: r
                .new_memories
                .into_iter()
                .map(|m| wit::NewMemory { kind: m.kind, content: m.content, priority: m.priority, tags: m.tags })
                .collect(),
            status: r.status,
            metadata: r.metadata,
        }),
        Err(SkillError::InvalidParams(m)) => Err(wit::SkillError::InvalidParams(m)),
        Err(SkillError::Failed(m)) => Err(wit::SkillError::Failed(m)),
    }
}

/// Export a [`Skill`] implementation as the component's `execute` function.
#[macro_export]
macro_rules! export_skill {
    ($skill:ty) => {
        #[doc(hidden)]
        struct __SkillhostExport;

        impl $crate::bindings::Guest for __SkillhostExport {
            fn execute(
                call: $crate::bindings::skillhost::skill::types::Invocation,
            ) -> ::core::result::Result<
                $crate::bindings::skillhost::skill::types::SkillResult,
                $crate::bindings::skillhost::skill::types::SkillError,
            > {
                $crate::__run::<$skill>(call)
            }
        }

        $crate::bindings::__export_skill_world!(__SkillhostExport);
    };
}
