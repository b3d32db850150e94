//! Streamed replies: server-sent events read as they arrive, shown through a
//! [`StreamObserver`], and folded back into the JSON the same request returns unstreamed, so
//! that `parse_reply` of each provider reads both and the loop cannot tell them apart.
//!
//! Two wire formats: OpenAI-compatible chat completions (`data: {chunk}` lines with
//! `choices[0].delta.content` and `delta.tool_calls[i]` fragments, usage in the last chunk
//! with `stream_options.include_usage`, then `data: [DONE]`) and Anthropic Messages
//! (`message_start`, `content_block_start` / `_delta` / `_stop`, `message_delta` with the
//! output usage, `message_stop`; `ping` and `error` events). A stream that ends before its end
//! marker, a chunk that is not JSON and an `error` event are [`StreamFault`]s, which the
//! transport retries like a dropped connection.

use std::sync::Arc;

use serde_json::{Map, Value, json};

/// What the user sees of a reply while it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent<'a> {
    /// The next piece of the reply's text.
    Text(&'a str),
    /// The model started a tool call.
    ToolCall { name: &'a str },
    /// The next piece of a tool call's JSON arguments.
    ToolArguments(&'a str),
    /// The reply is complete (an attempt that broke ends with a retry notice instead).
    End,
}

/// Told every piece of a streamed reply, in order.
pub type StreamObserver = Arc<dyn Fn(StreamEvent<'_>) + Send + Sync>;

/// How a stream broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamFault {
    /// The connection closed, or the body ended, before the end marker.
    Cut,
    /// A chunk is not the JSON the format promises.
    BadChunk,
    /// The service sent an error event in the middle of the stream (e.g. overloaded).
    ServiceError,
}

/// A [`StreamFault`] with what exactly happened.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Broken {
    pub fault: StreamFault,
    pub detail: String,
}

fn broken(fault: StreamFault, detail: impl Into<String>) -> Broken {
    Broken { fault, detail: detail.into() }
}

/// Splits a byte stream into server-sent events: `event:` and `data:` fields up to a blank
/// line; comments (`:`) and other fields are skipped; CRLF and LF line ends both work.
#[derive(Default)]
pub(crate) struct SseParser {
    pending: Vec<u8>,
    event: String,
    data: Vec<String>,
}

/// One event: its name (`message` when it has none) and its data lines joined by `\n`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseEvent {
    pub event: String,
    pub data: String,
}

impl SseParser {
    /// The events completed by `bytes`.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    let event = std::mem::take(&mut self.event);
                    events.push(SseEvent {
                        event: if event.is_empty() { "message".to_string() } else { event },
                        data: std::mem::take(&mut self.data).join("\n"),
                    });
                }
                self.event.clear();
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            match field {
                "event" => self.event = value.to_string(),
                "data" => self.data.push(value.to_string()),
                _ => {}
            }
        }
        events
    }

    /// Bytes of an unfinished line or event at the end of the body.
    pub fn has_partial(&self) -> bool {
        !self.pending.is_empty() || !self.data.is_empty()
    }
}

/// Folds the events of one attempt into the unstreamed reply's JSON.
pub(crate) trait StreamFold: Send {
    fn event(&mut self, event: &SseEvent, observer: &StreamObserver) -> Result<(), Broken>;
    /// The whole reply, once the stream ended; `Cut` when its end marker never came.
    fn finish(self: Box<Self>) -> Result<Value, Broken>;
}

fn parse_chunk(data: &str) -> Result<Value, Broken> {
    serde_json::from_str(data).map_err(|e| {
        let excerpt: String = data.chars().take(120).collect();
        broken(StreamFault::BadChunk, format!("a streamed chunk is not JSON ({e}): {excerpt}"))
    })
}

fn service_error(chunk: &Value) -> Broken {
    let error = chunk.get("error").unwrap_or(chunk);
    let message = error.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| error.to_string());
    broken(StreamFault::ServiceError, format!("the service sent an error mid-stream: {message}"))
}

/// OpenAI-compatible chat completion chunks.
#[derive(Default)]
pub(crate) struct OpenAiFold {
    model: Option<String>,
    text: Option<String>,
    /// By the index the chunks give: (id, name, arguments).
    calls: Vec<(Option<String>, String, String)>,
    usage: Option<Value>,
    done: bool,
}

impl StreamFold for OpenAiFold {
    fn event(&mut self, event: &SseEvent, observer: &StreamObserver) -> Result<(), Broken> {
        if event.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk = parse_chunk(&event.data)?;
        if chunk.get("error").is_some() {
            return Err(service_error(&chunk));
        }
        if let Some(model) = chunk.get("model").and_then(Value::as_str) {
            self.model = Some(model.to_string());
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        let Some(delta) = chunk.pointer("/choices/0/delta") else { return Ok(()) };
        if let Some(piece) = delta.get("content").and_then(Value::as_str)
            && !piece.is_empty()
        {
            self.text.get_or_insert_default().push_str(piece);
            observer(StreamEvent::Text(piece));
        }
        for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(self.calls.len() as u64) as usize;
            if index > self.calls.len() + 64 {
                return Err(broken(StreamFault::BadChunk, format!("a streamed tool call has index {index}")));
            }
            while self.calls.len() <= index {
                self.calls.push((None, String::new(), String::new()));
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.0 = Some(id.to_string());
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str)
                && !name.is_empty()
            {
                slot.1.push_str(name);
                observer(StreamEvent::ToolCall { name });
            }
            if let Some(piece) = call.pointer("/function/arguments").and_then(Value::as_str)
                && !piece.is_empty()
            {
                slot.2.push_str(piece);
                observer(StreamEvent::ToolArguments(piece));
            }
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Value, Broken> {
        if !self.done {
            return Err(broken(StreamFault::Cut, "the stream ended before `data: [DONE]`"));
        }
        let calls: Vec<Value> = self
            .calls
            .into_iter()
            .map(|(id, name, arguments)| {
                let mut call = json!({ "type": "function", "function": { "name": name, "arguments": arguments } });
                if let Some(id) = id {
                    call["id"] = json!(id);
                }
                call
            })
            .collect();
        let mut message = json!({ "role": "assistant", "content": self.text });
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        let mut reply = json!({ "choices": [{ "index": 0, "message": message }] });
        if let Some(model) = self.model {
            reply["model"] = json!(model);
        }
        if let Some(usage) = self.usage {
            reply["usage"] = usage;
        }
        Ok(reply)
    }
}

/// Anthropic Messages events.
#[derive(Default)]
pub(crate) struct AnthropicFold {
    model: Option<String>,
    /// By block index: the block as started, and the JSON text of a tool_use input.
    blocks: Vec<(Value, String)>,
    usage: Map<String, Value>,
    done: bool,
}

impl StreamFold for AnthropicFold {
    fn event(&mut self, event: &SseEvent, observer: &StreamObserver) -> Result<(), Broken> {
        let chunk = parse_chunk(&event.data)?;
        let kind = chunk.get("type").and_then(Value::as_str).unwrap_or(event.event.as_str());
        let index = || chunk.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match kind {
            "message_start" => {
                let message = chunk.get("message");
                if let Some(model) = message.and_then(|m| m.get("model")).and_then(Value::as_str) {
                    self.model = Some(model.to_string());
                }
                if let Some(usage) = message.and_then(|m| m.get("usage")).and_then(Value::as_object) {
                    self.usage.extend(usage.clone());
                }
            }
            "content_block_start" => {
                let index = index();
                if index > self.blocks.len() + 64 {
                    return Err(broken(StreamFault::BadChunk, format!("a content block has index {index}")));
                }
                while self.blocks.len() <= index {
                    self.blocks.push((Value::Null, String::new()));
                }
                let block = chunk.get("content_block").cloned().unwrap_or(Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => observer(StreamEvent::ToolCall {
                        name: block.get("name").and_then(Value::as_str).unwrap_or_default(),
                    }),
                    Some("text") => {
                        if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            observer(StreamEvent::Text(text));
                        }
                    }
                    _ => {}
                }
                self.blocks[index].0 = block;
            }
            "content_block_delta" => {
                let Some((block, input)) = self.blocks.get_mut(index()) else {
                    return Err(broken(StreamFault::BadChunk, "a content block delta came before its block started"));
                };
                let delta = chunk.get("delta");
                match delta.and_then(|d| d.get("type")).and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = delta.and_then(|d| d.get("text")).and_then(Value::as_str).unwrap_or_default();
                        let text = block.get("text").and_then(Value::as_str).unwrap_or_default().to_string() + piece;
                        block["text"] = json!(text);
                        observer(StreamEvent::Text(piece));
                    }
                    Some("input_json_delta") => {
                        let piece =
                            delta.and_then(|d| d.get("partial_json")).and_then(Value::as_str).unwrap_or_default();
                        input.push_str(piece);
                        observer(StreamEvent::ToolArguments(piece));
                    }
                    // thinking and signature deltas carry nothing the loop acts on.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(usage) = chunk.get("usage").and_then(Value::as_object) {
                    // Cumulative counts: the last one wins.
                    self.usage.extend(usage.clone());
                }
            }
            "message_stop" => self.done = true,
            "error" => return Err(service_error(&chunk)),
            // ping, content_block_stop, and event kinds added later.
            _ => {}
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Value, Broken> {
        if !self.done {
            return Err(broken(StreamFault::Cut, "the stream ended before `message_stop`"));
        }
        let mut content = Vec::with_capacity(self.blocks.len());
        for (mut block, input) in self.blocks {
            if block.get("type").and_then(Value::as_str) == Some("tool_use") && !input.trim().is_empty() {
                let parsed: Value = serde_json::from_str(&input)
                    .map_err(|e| broken(StreamFault::BadChunk, format!("the streamed tool input is not JSON ({e})")))?;
                block["input"] = parsed;
            }
            if !block.is_null() {
                content.push(block);
            }
        }
        let mut reply = json!({ "type": "message", "role": "assistant", "content": content, "usage": self.usage });
        if let Some(model) = self.model {
            reply["model"] = json!(model);
        }
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_lines_split_anywhere_and_crlf_work() {
        let mut parser = SseParser::default();
        let body = b": comment\r\nevent: ping\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata: [DONE]\n\n";
        let mut events = Vec::new();
        for piece in body.chunks(3) {
            events.extend(parser.push(piece));
        }
        assert_eq!(
            events,
            vec![
                SseEvent { event: "ping".into(), data: "{\"a\":\n1}".into() },
                SseEvent { event: "message".into(), data: "[DONE]".into() }
            ]
        );
        assert!(!parser.has_partial());
        assert!(parser.push(b"data: x").is_empty());
        assert!(parser.has_partial());
    }
}
