//! The commonest message a client sends, a `tools/call`, read without rmcp's general parse.
//!
//! Why: rmcp reads every message as an untagged `JsonRpcMessage` over untagged request
//! types, with `_meta` flattened beside the params; serde buffers the whole message into
//! a tree for that and walks it once per variant it tries (7-9% of a stdio call's server
//! CPU). A message that is plainly a `tools/call` is read here straight into rmcp's own
//! types instead, `_meta` included (rmcp's `CallToolRequestParams` has a field for it; rmcp's
//! parse moves it beside the params, and so does [`tools_call`]). Anything else or in doubt
//! (a parse error, another method) is `None`, and the caller takes rmcp's parse
//! ([`rmcp_tools_call`]) as before; what is read here is what rmcp's parse yields for the same
//! bytes (the tests hold the two side by side).

use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, JsonRpcRequest,
    JsonRpcVersion2_0, RequestId, RequestMetaObject,
};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

/// A `tools/call` request as rmcp's parse yields it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ToolsCall {
    pub(super) id: RequestId,
    /// Without `_meta` (rmcp keeps it beside them).
    pub(super) params: CallToolRequestParams,
    /// The request's `_meta`; empty when it has none.
    pub(super) meta: RequestMetaObject,
}

/// The envelope of a `tools/call`, read as rmcp reads a request: a JSON object (serde would
/// take a struct from an array too; rmcp's flattened types never do) with `method` and `id`
/// and neither `result` nor `error` (rmcp classifies a message by which keys it has). Other
/// members are ignored, as rmcp ignores them.
struct ToolsCallMessage {
    id: RequestId,
    params: CallToolRequestParams,
}

impl<'de> Deserialize<'de> for ToolsCallMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Envelope;

        impl<'de> Visitor<'de> for Envelope {
            type Value = ToolsCallMessage;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON-RPC tools/call request object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolsCallMessage, A::Error> {
                let (mut version, mut id, mut method, mut params) = (None, None, None, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "jsonrpc" => put(&mut version, map.next_value::<JsonRpcVersion2_0>()?)?,
                        "id" => put(&mut id, map.next_value::<RequestId>()?)?,
                        "method" => put(&mut method, map.next_value::<CallToolRequestMethod>()?)?,
                        "params" => put(&mut params, map.next_value::<ParamsObject>()?.0)?,
                        "result" | "error" => return Err(de::Error::custom("not a request")),
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                match (version, id, method, params) {
                    (Some(_), Some(id), Some(_), Some(params)) => Ok(ToolsCallMessage { id, params }),
                    _ => Err(de::Error::custom("an incomplete request")),
                }
            }
        }

        deserializer.deserialize_map(Envelope)
    }
}

/// A member seen once, as serde's derived types require.
fn put<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.replace(value).is_some() {
        return Err(E::custom("a member given twice"));
    }
    Ok(())
}

/// `params` read only from a JSON object, into rmcp's type.
struct ParamsObject(CallToolRequestParams);

impl<'de> Deserialize<'de> for ParamsObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Params;

        impl<'de> Visitor<'de> for Params {
            type Value = ParamsObject;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("tools/call params as an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ParamsObject, A::Error> {
                CallToolRequestParams::deserialize(de::value::MapAccessDeserializer::new(map)).map(ParamsObject)
            }
        }

        deserializer.deserialize_map(Params)
    }
}

/// `message` (one JSON-RPC message) as a `tools/call` request, or `None` to leave it to
/// rmcp's parse.
pub(super) fn tools_call(message: &[u8]) -> Option<ToolsCall> {
    let mut call: ToolsCallMessage = serde_json::from_slice(message).ok()?;
    let meta = call.params.meta.take().unwrap_or_default();
    Some(ToolsCall { id: call.id, params: call.params, meta })
}

/// `message` as a `tools/call` through rmcp's own parse (the way everything was read before
/// [`tools_call`]).
pub(super) fn rmcp_tools_call(message: &[u8]) -> Option<ToolsCall> {
    tools_call_of(serde_json::from_slice::<ClientJsonRpcMessage>(message).ok()?).ok()
}

/// A message rmcp parsed, as a `tools/call` (or given back).
pub(super) fn tools_call_of(message: ClientJsonRpcMessage) -> Result<ToolsCall, Box<ClientJsonRpcMessage>> {
    match message {
        JsonRpcMessage::Request(JsonRpcRequest { id, request: ClientRequest::CallToolRequest(call), .. }) => {
            // rmcp's parse keeps `_meta` beside the params, in the request's extensions
            // (where its `get_meta` reads it).
            let meta = call.extensions.get::<RequestMetaObject>().cloned().unwrap_or_default();
            Ok(ToolsCall { id, params: call.params, meta })
        }
        other => Err(Box::new(other)),
    }
}

/// Whether `needle` occurs in `haystack`.
pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_reads_as_rmcp_reads_it() {
        let taken = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","arguments":{"mode":"noop"}}}"#,
            r#"{"method":"tools/call","params":{"arguments":{"b":[1,2.5,-3,1e300,null],"a":{"é":"\u00e9\n"}},"name":"p\u0072obe"},"id":"req-7","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":-9007199254740993,"method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","id":"","method":"tools/call","params":{"name":"probe","arguments":null,"extra":1},"more":true}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"probe","requestState":"s","inputResponses":{}}}"#,
            r#" {"jsonrpc" : "2.0", "id" : 4, "method" : "tools\/call", "params" : {"name" : "probe"}} "#,
            // `_meta`, as each revision sends it, escaped, empty, `null`, or only in the arguments.
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"probe","_meta":{"progressToken":1}}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"tasks":{}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}},"name":"probe","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"probe","\u005fmeta":{"progressToken":"t"}}}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"probe","_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"probe","_meta":null}}"#,
            r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"probe","arguments":{"_meta":1}}}"#,
        ];
        for message in taken {
            let here = tools_call(message.as_bytes());
            assert!(here.is_some(), "taken here: {message}");
            assert_eq!(here, rmcp_tools_call(message.as_bytes()), "{message}");
        }
        let with_meta = tools_call(taken[6].as_bytes()).unwrap();
        assert!(with_meta.params.meta.is_none() && with_meta.meta.get_progress_token().is_some());
    }

    #[test]
    fn anything_else_is_left_to_rmcp() {
        let left = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","_meta":5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","_meta":{},"_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe"}} trailing"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe"}}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/call","params":{"name":"probe"}}"#,
        ];
        for message in left {
            assert_eq!(tools_call(message.as_bytes()), None, "{message}");
        }
        // Shapes serde would read into a struct (an array for an object) or that carry a
        // response's member: not requests to rmcp either, so not calls.
        let not_requests = [
            r#"["2.0",1,"tools/call",{"name":"probe"}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[null,"probe",null,null,null]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe"},"error":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe"},"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe"},"re\u0073ult":1}"#,
        ];
        for message in not_requests {
            assert_eq!(tools_call(message.as_bytes()), None, "{message}");
            assert_eq!(rmcp_tools_call(message.as_bytes()), None, "rmcp takes {message}");
        }
    }
}
