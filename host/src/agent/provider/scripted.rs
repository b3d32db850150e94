//! A provider that replays a decisions file: deterministic runs for tests and offline demos.
//! Its [`Provider::name`] is always `scripted (<path>)`, so whoever announces the provider
//! cannot pass a replay off as a model.
//!
//! The file is one JSON object with a list of replies per [`Purpose`]:
//!
//! ```json
//! {
//!   "comment": "anything; ignored",
//!   "decide": [
//!     {"reasoning": "read the log first", "next_action": "call_skill", "skill_name": "read-log-file", "parameters": {"path": "uart.log"}},
//!     "{\"reasoning\": \"a reply that is not valid JSON, returned verbatim\",",
//!     {"tool_call": {"name": "query-issue-kb", "arguments": {"query": "uart garbage"}}}
//!   ],
//!   "route": [{"profile": "log-analyst", "reason": "a UART log question"}],
//!   "summarize": ["Known: ... Open: ..."]
//! }
//! ```
//!
//! - a **string** is the reply text, verbatim (so a test can feed malformed JSON);
//! - an object whose only key is **`tool_call`** is a native tool call: `name` (string),
//!   `arguments` (an object, serialized; or a string, kept verbatim so it may be malformed),
//!   optional `id` (default `scripted-<purpose>-<n>`);
//! - any other **object** (or number, list...) is the reply text as serialized JSON.
//!
//! Each purpose's replies are consumed in order, whatever the request's format; running out is
//! [`ProviderError::ScriptExhausted`]. [`Provider::embed`] is a deterministic hashed
//! bag-of-words vector ([`EMBEDDING_DIMENSIONS`] wide, unit length), good enough for offline
//! retrieval tests and meaningless otherwise.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

use super::{ChatReply, ChatRequest, Provider, ProviderError, ProviderFuture, Purpose, ToolCall};

pub const EMBEDDING_DIMENSIONS: usize = 64;

pub struct ScriptedProvider {
    path: PathBuf,
    queues: Mutex<HashMap<Purpose, Queue>>,
}

struct Queue {
    replies: Vec<ChatReply>,
    used: usize,
}

impl ScriptedProvider {
    /// Reads and checks the whole decisions file now, so a broken file fails before the run
    /// starts rather than at the step that reaches the bad entry.
    pub fn load(path: &Path) -> Result<ScriptedProvider, ProviderError> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            ProviderError::Config(format!("cannot read decisions file {}: {error}", path.display()))
        })?;
        ScriptedProvider::parse(path, &text)
    }

    /// Like [`load`](Self::load), with the file's text given; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<ScriptedProvider, ProviderError> {
        let invalid = |detail: String| ProviderError::Config(format!("decisions file {} {detail}", path.display()));
        let json: Value = serde_json::from_str(text).map_err(|error| invalid(format!("is not valid JSON: {error}")))?;
        let Value::Object(sections) = json else {
            return Err(invalid(
                "must be a JSON object with a list of replies per purpose, e.g. {\"decide\": [...]}".to_string(),
            ));
        };
        let mut queues = HashMap::new();
        for (key, entries) in sections {
            if key == "comment" {
                continue;
            }
            let Some(purpose) = Purpose::ALL.into_iter().find(|purpose| purpose.as_str() == key) else {
                let known: Vec<&str> = Purpose::ALL.iter().map(|p| p.as_str()).collect();
                return Err(invalid(format!("has an unknown key `{key}`; use {} (or `comment`)", known.join(", "))));
            };
            let Value::Array(entries) = entries else {
                return Err(invalid(format!("has `{key}` that is not a list of replies")));
            };
            let replies = entries
                .into_iter()
                .enumerate()
                .map(|(index, entry)| {
                    reply(purpose, index, entry).map_err(|detail| invalid(format!("{key}[{index}]: {detail}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            queues.insert(purpose, Queue { replies, used: 0 });
        }
        Ok(ScriptedProvider { path: path.to_path_buf(), queues: Mutex::new(queues) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn next(&self, purpose: Purpose) -> Result<ChatReply, ProviderError> {
        // A poisoned lock only means another caller panicked mid-pop; the queue is still sound.
        let mut queues = self.queues.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let queue = queues.entry(purpose).or_insert_with(|| Queue { replies: Vec::new(), used: 0 });
        match queue.replies.get(queue.used) {
            Some(reply) => {
                queue.used += 1;
                Ok(reply.clone())
            }
            None => Err(ProviderError::ScriptExhausted { path: self.path.clone(), purpose, used: queue.used }),
        }
    }
}

/// `Err` says what is wrong with the entry (in the file's terms, as [`ScriptedProvider::parse`] names its place).
fn reply(purpose: Purpose, index: usize, entry: Value) -> Result<ChatReply, String> {
    let scripted = |text: Option<String>, tool_calls: Vec<ToolCall>| ChatReply {
        text,
        tool_calls,
        usage: None,
        model: "scripted".to_string(),
    };
    match entry {
        Value::String(text) => Ok(scripted(Some(text), Vec::new())),
        Value::Object(object) if object.len() == 1 && object.contains_key("tool_call") => {
            let call = &object["tool_call"];
            let name = call
                .get("name")
                .and_then(Value::as_str)
                .ok_or("`tool_call` needs a string `name` (and `arguments`)")?;
            let arguments = match call.get("arguments") {
                Some(Value::String(raw)) => raw.clone(),
                Some(other) => other.to_string(),
                None => "{}".to_string(),
            };
            let id = match call.get("id") {
                Some(Value::String(id)) => id.clone(),
                Some(_) => return Err("`tool_call.id` must be a string".to_string()),
                None => format!("scripted-{purpose}-{}", index + 1),
            };
            Ok(scripted(None, vec![ToolCall { id, name: name.to_string(), arguments }]))
        }
        other => Ok(scripted(Some(other.to_string()), Vec::new())),
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> String {
        format!("scripted ({})", self.path.display())
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ProviderFuture<'a, ChatReply> {
        let reply = self.next(request.purpose);
        Box::pin(async move { reply })
    }

    fn embed<'a>(&'a self, text: &'a str) -> ProviderFuture<'a, Vec<f32>> {
        let vector = hashed_embedding(text);
        Box::pin(async move { Ok(vector) })
    }
}

/// Lower-cased alphanumeric words hashed (FNV-1a) into buckets, then scaled to unit length.
pub fn hashed_embedding(text: &str) -> Vec<f32> {
    let mut vector = vec![0f32; EMBEDDING_DIMENSIONS];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()) {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in word.to_lowercase().bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        vector[(hash % EMBEDDING_DIMENSIONS as u64) as usize] += 1.0;
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_embedding_is_deterministic_unit_and_word_based() {
        let a = hashed_embedding("UART prints garbage");
        assert_eq!(a, hashed_embedding("uart, prints GARBAGE!"));
        assert!((a.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        assert_ne!(a, hashed_embedding("disk is full"));
        assert!(hashed_embedding("  ").iter().all(|x| *x == 0.0));
    }

    #[test]
    fn entries_become_replies() {
        let provider = ScriptedProvider::parse(
            Path::new("d.json"),
            r#"{"decide": [{"a": 1}, "raw {", {"tool_call": {"name": "x", "arguments": "{bad"}}, [1]]}"#,
        )
        .unwrap();
        assert_eq!(provider.next(Purpose::Decide).unwrap().text.as_deref(), Some(r#"{"a":1}"#));
        assert_eq!(provider.next(Purpose::Decide).unwrap().text.as_deref(), Some("raw {"));
        let call = provider.next(Purpose::Decide).unwrap();
        assert_eq!(call.text, None);
        assert_eq!(
            call.tool_calls[0],
            ToolCall { id: "scripted-decide-3".into(), name: "x".into(), arguments: "{bad".into() }
        );
        assert_eq!(provider.next(Purpose::Decide).unwrap().text.as_deref(), Some("[1]"));
    }

    #[test]
    fn bad_entries_are_named() {
        let error =
            ScriptedProvider::parse(Path::new("d.json"), r#"{"decide": ["ok", {"tool_call": {"arguments": {}}}]}"#)
                .err()
                .unwrap()
                .to_string();
        assert!(error.contains("d.json") && error.contains("decide[1]") && error.contains("`name`"), "{error}");
        let error = ScriptedProvider::parse(Path::new("d.json"), r#"{"decde": []}"#).err().unwrap().to_string();
        assert!(error.contains("unknown key `decde`") && error.contains("decide, route, summarize"), "{error}");
        let error = ScriptedProvider::parse(Path::new("d.json"), r#"["x"]"#).err().unwrap().to_string();
        assert!(error.contains("must be a JSON object"), "{error}");
    }
}
