//! LLM providers behind one interface: [`Provider::chat`] and [`Provider::embed`].
//!
//! Three kinds exist: [`openai::OpenAiProvider`] (any OpenAI-compatible chat completions server:
//! OpenAI, Ollama, vLLM, llama.cpp server, OpenRouter, DeepSeek, Qwen), [`anthropic::AnthropicProvider`]
//! (Anthropic Messages) and [`scripted::ScriptedProvider`] (replays a decisions file, for tests and
//! offline demos). [`config::resolve`] reads `skillhost.toml` and the environment and [`open`]
//! builds the configured one.
//!
//! The loop is async and holds an `Arc<dyn Provider>`, so the methods return boxed futures:
//! `async fn` in a trait is not object safe. Every failure is a [`ProviderError`] whose `Display`
//! is one sentence naming the provider and what to do, because the loop shows it to the user as is.

pub mod anthropic;
pub mod config;
mod http;
pub mod openai;
pub mod scripted;
pub mod stream;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use config::{ProviderConfig, ProviderKind, resolve};
pub use stream::{StreamEvent, StreamFault, StreamObserver};

/// The future returned by [`Provider`] methods.
pub type ProviderFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ProviderError>> + Send + 'a>>;

/// A chat model (and, where the service has one, an embedding model).
pub trait Provider: Send + Sync {
    /// What to announce to the user, e.g. `OpenAI-compatible provider at http://127.0.0.1:11434/v1
    /// (model qwen3)` or `scripted (examples/log-analysis/decisions.json)`.
    fn name(&self) -> String;

    /// One chat completion, whole: the loop needs the whole action before acting. (A
    /// provider opened with a [`StreamObserver`] shows the reply while it arrives, and still
    /// returns it whole.)
    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ProviderFuture<'a, ChatReply>;

    /// An embedding of `text`, for memory retrieval.
    fn embed<'a>(&'a self, text: &'a str) -> ProviderFuture<'a, Vec<f32>>;
}

/// Builds the provider `config` describes.
pub fn open(config: &ProviderConfig) -> Result<Arc<dyn Provider>, ProviderError> {
    open_with(config, None)
}

/// [`open`], telling `on_retry` before every wait between attempts of an HTTP provider.
pub fn open_with(config: &ProviderConfig, on_retry: Option<RetryObserver>) -> Result<Arc<dyn Provider>, ProviderError> {
    open_streaming(config, on_retry, None)
}

/// [`open_with`]; with `on_stream`, an HTTP provider asks for streamed replies and shows
/// every piece to it as it arrives (the replies it returns are the same as unstreamed).
pub fn open_streaming(
    config: &ProviderConfig,
    on_retry: Option<RetryObserver>,
    on_stream: Option<StreamObserver>,
) -> Result<Arc<dyn Provider>, ProviderError> {
    Ok(match config.kind {
        ProviderKind::OpenAi => Arc::new(openai::OpenAiProvider::with_observers(config, on_retry, on_stream)?),
        ProviderKind::Anthropic => Arc::new(anthropic::AnthropicProvider::with_observers(config, on_retry, on_stream)?),
        ProviderKind::Scripted => {
            let path = config.decisions.as_ref().ok_or_else(|| {
                ProviderError::Config(
                    "provider kind `scripted` needs a decisions file: set `decisions` in the [provider] table of skillhost.toml"
                        .to_string(),
                )
            })?;
            Arc::new(scripted::ScriptedProvider::load(path)?)
        }
    })
}

/// Called before every wait between two attempts of one request.
pub type RetryObserver = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

/// Why an attempt is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RetryReason {
    /// HTTP 429.
    RateLimited,
    /// HTTP 408 or 5xx.
    Status { status: u16 },
    /// No answer within the per-attempt timeout.
    Timeout {
        #[serde(serialize_with = "millis")]
        after: Duration,
    },
    /// The connection broke mid-exchange.
    Dropped,
    /// A streamed reply broke: cut before its end, a chunk that is not JSON, an error event.
    BrokenStream { fault: StreamFault },
}

fn millis<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(duration.as_millis() as u64)
}

/// One retry about to happen: what failed, how long the host waits, and which attempt comes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetryNotice {
    pub provider: String,
    pub reason: RetryReason,
    /// The attempt that failed (1-based).
    pub failed_attempt: u32,
    /// Attempts in all (`max_retries` + 1).
    pub attempts: u32,
    /// How long the host waits before the next attempt.
    pub wait_ms: u64,
    /// What the server's `Retry-After` asked for, if it sent one.
    pub retry_after_ms: Option<u64>,
    /// The server asked for longer than `max_backoff`, so the wait was cut to it.
    pub capped: bool,
}

impl std::fmt::Display for RetryNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
        match self.reason {
            RetryReason::RateLimited => write!(f, "the {} is rate limiting (HTTP 429)", self.provider)?,
            RetryReason::Status { status } => write!(f, "the {} answered HTTP {status}", self.provider)?,
            RetryReason::Timeout { after } => {
                write!(f, "the {} did not answer within {}", self.provider, secs(after.as_millis() as u64))?
            }
            RetryReason::Dropped => write!(f, "the {} dropped the connection", self.provider)?,
            RetryReason::BrokenStream { fault } => {
                let how = match fault {
                    StreamFault::Cut => "was cut off before its end",
                    StreamFault::BadChunk => "sent a chunk that is not valid JSON",
                    StreamFault::ServiceError => "ended with an error event",
                };
                write!(f, "the streamed reply of the {} {how}", self.provider)?
            }
        }
        write!(f, " on attempt {} of {}; retrying in {}", self.failed_attempt, self.attempts, secs(self.wait_ms))?;
        match self.retry_after_ms {
            Some(asked) if self.capped => {
                write!(f, " (it asked for {} in Retry-After; waits are capped at `max_backoff`)", secs(asked))
            }
            Some(_) => write!(f, " (as its Retry-After asked)"),
            None => Ok(()),
        }
    }
}

/// Who wrote a [`ChatMessage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of a tool call, answering the assistant's [`ToolCall`] with the same id.
    Tool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// For [`Role::Tool`]: the id of the [`ToolCall`] this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For [`Role::Assistant`]: the tool calls the model made in this turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

impl ChatMessage {
    fn plain(role: Role, content: impl Into<String>) -> ChatMessage {
        ChatMessage { role, content: content.into(), tool_call_id: None, tool_calls: Vec::new() }
    }

    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::plain(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::plain(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::plain(Role::Assistant, content)
    }

    /// The assistant turn that made `calls` (echoed back so the model sees its own calls).
    pub fn assistant_tool_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage { tool_calls: calls, ..ChatMessage::plain(Role::Assistant, content) }
    }

    /// The result of the tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage { tool_call_id: Some(call_id.into()), ..ChatMessage::plain(Role::Tool, content) }
    }
}

/// A function the model may call (native tool calling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// What shape the reply must have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Free text.
    Text,
    /// One JSON object as text. OpenAI-compatible servers enforce it (`response_format`; OpenAI
    /// requires the word "JSON" somewhere in the messages); Anthropic has no JSON mode, so the
    /// system prompt asks for it and the caller still has to parse defensively.
    Json,
    /// The model must call one of these tools.
    Tools(Vec<ToolSpec>),
}

/// Why the loop asks; the scripted provider keeps one reply queue per purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    /// Pick the next action.
    Decide,
    /// Pick the agent profile for a request.
    Route,
    /// Summarize what is known (step limit, older history).
    Summarize,
}

impl Purpose {
    pub const ALL: [Purpose; 3] = [Purpose::Decide, Purpose::Route, Purpose::Summarize];

    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Decide => "decide",
            Purpose::Route => "route",
            Purpose::Summarize => "summarize",
        }
    }
}

impl std::fmt::Display for Purpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub format: ResponseFormat,
    pub purpose: Purpose,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
}

impl ChatRequest {
    pub fn new(purpose: Purpose, format: ResponseFormat, messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest { messages, format, purpose, max_tokens: None, temperature: None }
    }
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them: JSON text that may be malformed, because
    /// repairing it (or asking again) is the loop's job, not the transport's.
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatReply {
    /// The text part of the reply, if any (the action JSON in JSON mode).
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    /// The model that answered, as the service reports it.
    pub model: String,
}

/// Why a provider call failed. `Display` is one sentence for the user: what went wrong with
/// which provider, and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// No HTTP exchange happened (refused, DNS, TLS) or the connection kept dropping.
    #[error("cannot reach the {provider}: {reason}; {hint}")]
    Unreachable { provider: String, reason: String, hint: String },

    /// 401/403.
    #[error(
        "the {provider} rejected the API key (HTTP {status}: {detail}); set {key_env} to a valid key (or point `api_key_env` in skillhost.toml at the variable that holds it)"
    )]
    Auth { provider: String, status: u16, detail: String, key_env: String },

    /// 404: almost always a model name the server does not serve, or a wrong base URL path.
    #[error(
        "the {provider} answered 404 for model `{model}` ({detail}); set {setting} to a model it serves, and check that the base URL ends where its API starts (e.g. `/v1`)"
    )]
    NotFound { provider: String, model: String, setting: String, detail: String },

    /// 429 on every attempt.
    #[error(
        "the {provider} is rate limiting (HTTP 429) and still was after {attempts} attempts ({detail}); wait and try again, or raise `max_retries` in skillhost.toml"
    )]
    RateLimited { provider: String, attempts: u32, detail: String },

    /// 5xx on every attempt.
    #[error(
        "the {provider} failed with HTTP {status} on all {attempts} attempts ({detail}); try again later or check the server's logs"
    )]
    Server { provider: String, status: u16, attempts: u32, detail: String },

    /// Another 4xx: the service did not accept the request as sent.
    #[error(
        "the {provider} rejected the request with HTTP {status} ({detail}); check that model `{model}` supports this kind of request (JSON mode, tool calling)"
    )]
    Rejected { provider: String, status: u16, model: String, detail: String },

    /// A 2xx whose body is not what the API promises (not JSON, no choices, ...).
    #[error(
        "the {provider} sent a reply skillhost cannot use: {detail}; check that the base URL points at the right API"
    )]
    BadResponse { provider: String, detail: String },

    #[error(
        "the {provider} did not answer within {} s on all {attempts} attempts; raise `timeout_secs` in skillhost.toml if the model is slow, or check that the server is not stuck", .after.as_secs_f64()
    )]
    Timeout { provider: String, after: Duration, attempts: u32 },

    /// A streamed reply broke on every attempt.
    #[error(
        "the streamed reply of the {provider} broke on all {attempts} attempts ({detail}); try again, or set `stream = false` in the [provider] table of skillhost.toml if the server's streaming is broken"
    )]
    BrokenStream { provider: String, attempts: u32, detail: String },

    /// The service has no such endpoint (Anthropic embeddings).
    #[error("the {provider} cannot {what}; {hint}")]
    Unsupported { provider: String, what: String, hint: String },

    /// Bad `skillhost.toml`, environment or decisions file.
    #[error("{0}")]
    Config(String),

    /// The scripted provider ran out of replies for a purpose.
    #[error(
        "decisions file {} has no more `{purpose}` replies (used {used}); add replies to it, or configure a real provider", .path.display()
    )]
    ScriptExhausted { path: PathBuf, purpose: Purpose, used: usize },
}
