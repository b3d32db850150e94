//! OpenAI-compatible chat completions (`POST {base}/chat/completions`) and embeddings
//! (`POST {base}/embeddings`).
//!
//! The one wire format that OpenAI, Ollama (`http://127.0.0.1:11434/v1`), vLLM, llama.cpp
//! server, OpenRouter, DeepSeek and Qwen all speak, so only the base URL differs. JSON mode is
//! `response_format: {"type": "json_object"}`; tool calling is `tools` with `tool_choice:
//! "required"`. Replies are read leniently because compatible servers deviate in the details:
//! tool call ids may be missing, `arguments` may be an object instead of a string, `content`
//! may be a list of parts.

use serde_json::{Value, json};

use super::http::{Endpoint, JsonClient, ModelRef, Streaming};
use super::stream::{OpenAiFold, StreamFold, StreamObserver};
use super::{
    ChatMessage, ChatReply, ChatRequest, Provider, ProviderConfig, ProviderError, ProviderFuture, ResponseFormat,
    RetryObserver, Role, ToolCall, Usage,
};

pub struct OpenAiProvider {
    client: JsonClient,
    base_url: String,
    model: String,
    embedding_model: String,
    api_key: Option<String>,
    /// Set: replies are streamed (`stream: true`) and shown to it as they arrive.
    on_stream: Option<StreamObserver>,
}

impl OpenAiProvider {
    pub fn new(config: &ProviderConfig) -> Result<OpenAiProvider, ProviderError> {
        OpenAiProvider::with_observer(config, None)
    }

    /// [`OpenAiProvider::new`], telling `on_retry` before every wait between attempts.
    pub fn with_observer(
        config: &ProviderConfig,
        on_retry: Option<RetryObserver>,
    ) -> Result<OpenAiProvider, ProviderError> {
        OpenAiProvider::with_observers(config, on_retry, None)
    }

    /// [`OpenAiProvider::with_observer`]; with `on_stream`, replies are streamed to it.
    pub fn with_observers(
        config: &ProviderConfig,
        on_retry: Option<RetryObserver>,
        on_stream: Option<StreamObserver>,
    ) -> Result<OpenAiProvider, ProviderError> {
        let endpoint = Endpoint {
            label: format!("OpenAI-compatible provider at {}", config.base_url),
            key_env: config.api_key_env.clone(),
            unreachable_hint:
                "is the server running? set OPENAI_BASE_URL or `base_url` in skillhost.toml to where it listens"
                    .to_string(),
        };
        Ok(OpenAiProvider {
            client: JsonClient::new(endpoint, config, on_retry)?,
            base_url: config.base_url.clone(),
            model: config.model.clone(),
            embedding_model: config.embedding_model.clone(),
            api_key: config.api_key.clone(),
            on_stream,
        })
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        // Local servers (Ollama, llama.cpp) need no key; sending none keeps them happy.
        self.api_key.iter().map(|key| ("authorization", format!("Bearer {key}"))).collect()
    }

    async fn chat_inner(&self, request: &ChatRequest) -> Result<ChatReply, ProviderError> {
        let mut body = request_body(&self.model, request);
        let url = format!("{}/chat/completions", self.base_url);
        let model = ModelRef { name: &self.model, setting: "SKILLHOST_MODEL or `model` in skillhost.toml" };
        let reply = match &self.on_stream {
            Some(observer) => {
                body["stream"] = json!(true);
                // The token usage comes in a last chunk only when asked for.
                body["stream_options"] = json!({ "include_usage": true });
                let fold = || Box::new(OpenAiFold::default()) as Box<dyn StreamFold>;
                let streaming = Streaming { fold: &fold, observer };
                self.client.post_streamed(&url, &self.headers(), &body, model, streaming).await?
            }
            None => self.client.post(&url, &self.headers(), &body, model).await?,
        };
        parse_reply(&reply, &self.model)
            .map_err(|detail| ProviderError::BadResponse { provider: self.client.endpoint().label.clone(), detail })
    }

    async fn embed_inner(&self, text: &str) -> Result<Vec<f32>, ProviderError> {
        let body = json!({ "model": self.embedding_model, "input": text });
        let url = format!("{}/embeddings", self.base_url);
        let model = ModelRef { name: &self.embedding_model, setting: "`embedding_model` in skillhost.toml" };
        let reply = self.client.post(&url, &self.headers(), &body, model).await?;
        parse_embedding(&reply)
            .map_err(|detail| ProviderError::BadResponse { provider: self.client.endpoint().label.clone(), detail })
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> String {
        format!("{} (model {})", self.client.endpoint().label, self.model)
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> ProviderFuture<'a, ChatReply> {
        Box::pin(self.chat_inner(request))
    }

    fn embed<'a>(&'a self, text: &'a str) -> ProviderFuture<'a, Vec<f32>> {
        Box::pin(self.embed_inner(text))
    }
}

/// The `/chat/completions` body for `request`.
pub fn request_body(model: &str, request: &ChatRequest) -> Value {
    let mut body = json!({
        "model": model,
        "messages": request.messages.iter().map(message_json).collect::<Vec<_>>(),
    });
    if let Some(max_tokens) = request.max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    match &request.format {
        ResponseFormat::Text => {}
        ResponseFormat::Json => body["response_format"] = json!({ "type": "json_object" }),
        ResponseFormat::Tools(tools) => {
            body["tools"] = tools
                .iter()
                .map(|tool| {
                    json!({
                        "type": "function",
                        "function": { "name": tool.name, "description": tool.description, "parameters": tool.parameters },
                    })
                })
                .collect();
            body["tool_choice"] = json!("required");
        }
    }
    body
}

fn message_json(message: &ChatMessage) -> Value {
    match message.role {
        Role::System => json!({ "role": "system", "content": message.content }),
        Role::User => json!({ "role": "user", "content": message.content }),
        Role::Assistant if message.tool_calls.is_empty() => json!({ "role": "assistant", "content": message.content }),
        Role::Assistant => {
            let calls: Vec<Value> = message
                .tool_calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": { "name": call.name, "arguments": call.arguments },
                    })
                })
                .collect();
            let content = if message.content.is_empty() { Value::Null } else { json!(message.content) };
            json!({ "role": "assistant", "content": content, "tool_calls": calls })
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": message.tool_call_id.as_deref().unwrap_or_default(),
            "content": message.content,
        }),
    }
}

/// Reads a chat completion. `Err` is the detail for [`ProviderError::BadResponse`].
pub fn parse_reply(reply: &Value, configured_model: &str) -> Result<ChatReply, String> {
    let Some(choice) = reply.get("choices").and_then(Value::as_array).and_then(|choices| choices.first()) else {
        let why = match reply.pointer("/error/message").or_else(|| reply.get("error")) {
            Some(error) => format!("the reply has no choices but an error: {error}"),
            None => "the reply has no choices".to_string(),
        };
        return Err(why);
    };
    let message = choice.get("message").ok_or("the first choice has no `message`")?;
    let text = match message.get("content") {
        Some(Value::String(text)) => Some(text.clone()),
        // Some servers send content parts: [{"type": "text", "text": "..."}].
        Some(Value::Array(parts)) => {
            Some(parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<String>())
        }
        _ => None,
    };
    let tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| calls.iter().enumerate().map(|(index, call)| tool_call(index, call)).collect())
        .unwrap_or_default();
    Ok(ChatReply {
        text,
        tool_calls,
        usage: usage(reply.get("usage")),
        model: reply.get("model").and_then(Value::as_str).unwrap_or(configured_model).to_string(),
    })
}

fn tool_call(index: usize, call: &Value) -> ToolCall {
    let function = call.get("function");
    let field = |name: &str| function.and_then(|f| f.get(name));
    ToolCall {
        id: call.get("id").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| format!("call_{index}")),
        name: field("name").and_then(Value::as_str).unwrap_or_default().to_string(),
        arguments: match field("arguments") {
            Some(Value::String(raw)) => raw.clone(),
            Some(Value::Null) | None => "{}".to_string(),
            Some(other) => other.to_string(),
        },
    }
}

fn usage(usage: Option<&Value>) -> Option<Usage> {
    let usage = usage?;
    Some(Usage {
        prompt_tokens: usage.get("prompt_tokens")?.as_u64()?,
        completion_tokens: usage.get("completion_tokens").and_then(Value::as_u64).unwrap_or(0),
    })
}

fn parse_embedding(reply: &Value) -> Result<Vec<f32>, String> {
    let vector = reply
        .pointer("/data/0/embedding")
        .and_then(Value::as_array)
        .ok_or("the embeddings reply has no `data[0].embedding` array")?;
    vector
        .iter()
        .map(|x| x.as_f64().map(|x| x as f32).ok_or_else(|| format!("the embedding holds a non-number: {x}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{Purpose, ToolSpec};
    use super::*;

    #[test]
    fn tool_history_round_trips_in_openai_shape() {
        let call = ToolCall { id: "call_1".into(), name: "read-log-file".into(), arguments: r#"{"path":"a"}"#.into() };
        let request = ChatRequest::new(
            Purpose::Decide,
            ResponseFormat::Tools(vec![ToolSpec {
                name: "read-log-file".into(),
                description: "reads".into(),
                parameters: json!({"type": "object"}),
            }]),
            vec![
                ChatMessage::system("sys"),
                ChatMessage::user("go"),
                ChatMessage::assistant_tool_calls("", vec![call]),
                ChatMessage::tool_result("call_1", "L1 ok"),
            ],
        );
        let body = request_body("m", &request);
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], r#"{"path":"a"}"#);
        assert_eq!(body["messages"][3], json!({"role": "tool", "tool_call_id": "call_1", "content": "L1 ok"}));
        assert_eq!(body["tool_choice"], "required");
        assert!(body.get("response_format").is_none());
    }

    #[test]
    fn lenient_reply_parsing() {
        // Ollama-style: object arguments, no id; content parts.
        let reply = json!({
            "choices": [{"message": {
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "tool_calls": [{"function": {"name": "x", "arguments": {"k": 1}}}],
            }}],
        });
        let parsed = parse_reply(&reply, "configured").unwrap();
        assert_eq!(parsed.text.as_deref(), Some("ab"));
        assert_eq!(
            parsed.tool_calls[0],
            ToolCall { id: "call_0".into(), name: "x".into(), arguments: r#"{"k":1}"#.into() }
        );
        assert_eq!(parsed.model, "configured");
        assert_eq!(parsed.usage, None);

        let error = parse_reply(&json!({"choices": []}), "m").unwrap_err();
        assert_eq!(error, "the reply has no choices");
        let error = parse_reply(&json!({"error": {"message": "overloaded"}}), "m").unwrap_err();
        assert!(error.contains("overloaded"), "{error}");
    }

    #[test]
    fn embedding_parsing() {
        assert_eq!(parse_embedding(&json!({"data": [{"embedding": [0.5, -1]}]})).unwrap(), vec![0.5, -1.0]);
        assert!(parse_embedding(&json!({"data": []})).is_err());
        assert!(parse_embedding(&json!({"data": [{"embedding": ["x"]}]})).is_err());
    }
}
