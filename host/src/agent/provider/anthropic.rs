//! Anthropic Messages (`POST {base}/v1/messages`).
//!
//! Differences from the OpenAI shape that this module absorbs: the system prompt is the
//! top-level `system` field; `max_tokens` is required; tool calls are `tool_use` content blocks
//! and their results go back as `tool_result` blocks in a user turn; consecutive turns of the same
//! role are merged because the API expects user and assistant to alternate. There is no JSON
//! mode, so [`ResponseFormat::Json`] becomes an instruction in the system prompt, and no
//! embeddings endpoint.

use serde_json::{Value, json};

use super::http::{Endpoint, JsonClient, ModelRef, Streaming};
use super::stream::{AnthropicFold, StreamFold, StreamObserver};
use super::{
    ChatMessage, ChatReply, ChatRequest, Provider, ProviderConfig, ProviderError, ProviderFuture, ResponseFormat,
    RetryObserver, Role, ToolCall, Usage,
};

pub const API_VERSION: &str = "2023-06-01";
/// `max_tokens` is mandatory in the Messages API; enough for an action or a report.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
const JSON_INSTRUCTION: &str = "Answer with exactly one JSON object and nothing else.";

pub struct AnthropicProvider {
    client: JsonClient,
    base_url: String,
    model: String,
    api_key: String,
    /// Set: replies are streamed (`stream: true`) and shown to it as they arrive.
    on_stream: Option<StreamObserver>,
}

impl AnthropicProvider {
    pub fn new(config: &ProviderConfig) -> Result<AnthropicProvider, ProviderError> {
        AnthropicProvider::with_observer(config, None)
    }

    /// [`AnthropicProvider::new`], telling `on_retry` before every wait between attempts.
    pub fn with_observer(
        config: &ProviderConfig,
        on_retry: Option<RetryObserver>,
    ) -> Result<AnthropicProvider, ProviderError> {
        AnthropicProvider::with_observers(config, on_retry, None)
    }

    /// [`AnthropicProvider::with_observer`]; with `on_stream`, replies are streamed to it.
    pub fn with_observers(
        config: &ProviderConfig,
        on_retry: Option<RetryObserver>,
        on_stream: Option<StreamObserver>,
    ) -> Result<AnthropicProvider, ProviderError> {
        let api_key = config.api_key.clone().ok_or_else(|| {
            ProviderError::Config(format!(
                "the Anthropic provider needs an API key: set {} (or point `api_key_env` in skillhost.toml at the variable that holds it)",
                config.api_key_env
            ))
        })?;
        let endpoint = Endpoint {
            label: format!("Anthropic provider at {}", config.base_url),
            key_env: config.api_key_env.clone(),
            unreachable_hint:
                "check the network connection, or set ANTHROPIC_BASE_URL or `base_url` in skillhost.toml if you go through a proxy"
                    .to_string(),
        };
        Ok(AnthropicProvider {
            client: JsonClient::new(endpoint, config, on_retry)?,
            base_url: config.base_url.clone(),
            model: config.model.clone(),
            api_key,
            on_stream,
        })
    }

    async fn chat_inner(&self, request: &ChatRequest) -> Result<ChatReply, ProviderError> {
        let mut body = request_body(&self.model, request);
        let url = format!("{}/v1/messages", self.base_url);
        let headers = [("x-api-key", self.api_key.clone()), ("anthropic-version", API_VERSION.to_string())];
        let model = ModelRef { name: &self.model, setting: "SKILLHOST_MODEL or `model` in skillhost.toml" };
        let reply = match &self.on_stream {
            Some(observer) => {
                body["stream"] = json!(true);
                let fold = || Box::new(AnthropicFold::default()) as Box<dyn StreamFold>;
                let streaming = Streaming { fold: &fold, observer };
                self.client.post_streamed(&url, &headers, &body, model, streaming).await?
            }
            None => self.client.post(&url, &headers, &body, model).await?,
        };
        parse_reply(&reply, &self.model)
            .map_err(|detail| ProviderError::BadResponse { provider: self.client.endpoint().label.clone(), detail })
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> String {
        format!("{} (model {})", self.client.endpoint().label, self.model)
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ProviderFuture<'a, ChatReply> {
        Box::pin(self.chat_inner(request))
    }

    fn embed<'a>(&'a self, _text: &'a str) -> ProviderFuture<'a, Vec<f32>> {
        Box::pin(async move {
            Err(ProviderError::Unsupported {
                provider: self.client.endpoint().label.clone(),
                what: "compute embeddings, because Anthropic has no embeddings endpoint".to_string(),
                hint: "use an OpenAI-compatible provider (e.g. Ollama with an embedding model) for embeddings"
                    .to_string(),
            })
        })
    }
}

/// The `/v1/messages` body for `request`.
pub fn request_body(model: &str, request: &ChatRequest) -> Value {
    let mut system: Vec<&str> =
        request.messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_str()).collect();
    if request.format == ResponseFormat::Json {
        system.push(JSON_INSTRUCTION);
    }
    let mut body = json!({
        "model": model,
        "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": turns(&request.messages),
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    if let ResponseFormat::Tools(tools) = &request.format {
        body["tools"] = tools
            .iter()
            .map(|tool| json!({ "name": tool.name, "description": tool.description, "input_schema": tool.parameters }))
            .collect();
        body["tool_choice"] = json!({ "type": "any" });
    }
    body
}

/// Non-system messages as alternating user/assistant turns of content blocks.
fn turns(messages: &[ChatMessage]) -> Vec<Value> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            Role::System => continue,
            Role::User => ("user", text_block(&message.content).into_iter().collect()),
            Role::Assistant => {
                let mut blocks: Vec<Value> = text_block(&message.content).into_iter().collect();
                blocks.extend(message.tool_calls.iter().map(|call| {
                    json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(&call.arguments) })
                }));
                ("assistant", blocks)
            }
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.as_deref().unwrap_or_default(),
                    "content": message.content,
                })],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // The API wants tool results first in the user turn that answers a tool use.
            blocks.sort_by_key(|block| block["type"] != "tool_result");
            json!({ "role": role, "content": blocks })
        })
        .collect()
}

/// The API rejects empty text blocks.
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({ "type": "text", "text": text }))
}

/// `tool_use.input` must be an object; arguments the model once wrote malformed are kept
/// visible instead of dropped, so the history stays honest.
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(object)) => Value::Object(object),
        _ => json!({ "unparsed_arguments": arguments }),
    }
}

/// Reads a Messages reply. `Err` is the detail for [`ProviderError::BadResponse`].
pub fn parse_reply(reply: &Value, configured_model: &str) -> Result<ChatReply, String> {
    if reply.get("type").and_then(Value::as_str) == Some("error") {
        return Err(format!("the reply is an error: {}", reply.get("error").unwrap_or(&Value::Null)));
    }
    let blocks = reply.get("content").and_then(Value::as_array).ok_or("the reply has no `content` array")?;
    let mut text: Option<String> = None;
    let mut tool_calls = Vec::new();
    for (index, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                text.get_or_insert_default().push_str(block.get("text").and_then(Value::as_str).unwrap_or_default())
            }
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("toolu_{index}")),
                name: block.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                arguments: block.get("input").map(Value::to_string).unwrap_or_else(|| "{}".to_string()),
            }),
            // thinking and other blocks carry nothing the loop acts on.
            _ => {}
        }
    }
    let usage = reply.get("usage").and_then(|usage| {
        Some(Usage {
            prompt_tokens: usage.get("input_tokens")?.as_u64()?,
            completion_tokens: usage.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
        })
    });
    Ok(ChatReply {
        text,
        tool_calls,
        usage,
        model: reply.get("model").and_then(Value::as_str).unwrap_or(configured_model).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Purpose;
    use super::*;

    #[test]
    fn history_becomes_alternating_turns_with_tool_results_first() {
        let call = ToolCall { id: "toolu_1".into(), name: "read".into(), arguments: r#"{"path":"a"}"#.into() };
        let broken = ToolCall { id: "toolu_2".into(), name: "read".into(), arguments: "{path:".into() };
        let request = ChatRequest::new(
            Purpose::Decide,
            ResponseFormat::Json,
            vec![
                ChatMessage::system("role"),
                ChatMessage::user("goal"),
                ChatMessage::assistant_tool_calls("thinking", vec![call, broken]),
                ChatMessage::tool_result("toolu_1", "L1 ok"),
                ChatMessage::user("memories stored: 1"),
                ChatMessage::tool_result("toolu_2", "invalid"),
            ],
        );
        let body = request_body("claude", &request);
        assert_eq!(body["system"], format!("role\n\n{JSON_INSTRUCTION}"));
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3, "{body:#}");
        assert_eq!(messages[1]["content"][1]["input"], json!({"path": "a"}));
        assert_eq!(messages[1]["content"][2]["input"], json!({"unparsed_arguments": "{path:"}));
        let answer: Vec<&str> =
            messages[2]["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(answer, ["tool_result", "tool_result", "text"]);
    }

    #[test]
    fn reply_blocks() {
        let reply = json!({
            "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "hm"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {"path": "a"}},
            ],
            "usage": {"input_tokens": 10, "output_tokens": 3},
        });
        let parsed = parse_reply(&reply, "m").unwrap();
        assert_eq!(parsed.text.as_deref(), Some("calling"));
        assert_eq!(parsed.tool_calls[0].arguments, r#"{"path":"a"}"#);
        assert_eq!(parsed.usage, Some(Usage { prompt_tokens: 10, completion_tokens: 3 }));
        assert_eq!(parsed.model, "claude-x");
        assert!(parse_reply(&json!({"type": "error", "error": {"message": "x"}}), "m").is_err());
        assert!(parse_reply(&json!({"id": "x"}), "m").is_err());
    }
}
