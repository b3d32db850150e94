//! The commonest message a client sends, a `tools/call` with no `_meta`, read without
//! rmcp's general parse.
//!
//! Why: rmcp reads every message as an untagged `JsonRpcMessage` over untagged request
//! types, with `_meta` flattened beside the params; serde buffers the whole message into
//! a tree for that and walks it once per variant it tries (~7% of a stdio call's server
//! CPU). A message that is plainly a `tools/call` is read here straight into rmcp's own
//! `CallToolRequestParams` instead. Anything else, or anything in doubt (a `_meta` anywhere,
//! a field rmcp's parse could read otherwise, a parse error), is `None`, and the caller
//! takes rmcp's parse as before; what is read here is what rmcp's parse yields for the
//! same bytes (the tests hold the two side by side).

use rmcp::model::{CallToolRequestMethod, CallToolRequestParams, JsonRpcVersion2_0, RequestId};
use serde::Deserialize;

/// The envelope of a plain `tools/call`; other members are ignored, as rmcp ignores them.
#[derive(Deserialize)]
struct PlainToolsCall {
    #[allow(dead_code)] // checked by its type: exactly "2.0"
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[allow(dead_code)] // checked by its type: exactly "tools/call"
    method: CallToolRequestMethod,
    params: CallToolRequestParams,
}

/// `message` (one JSON-RPC message) as a `tools/call` request with no `_meta`, or `None`
/// to leave it to rmcp's parse.
pub(super) fn plain_tools_call(message: &[u8]) -> Option<(RequestId, CallToolRequestParams)> {
    // rmcp lifts `_meta` out of the params into the request's extensions; such a request
    // is left to it. (An escaped key is not found here, but then the params come back
    // with `meta` set, and are left to it too.)
    if contains(message, b"_meta") {
        return None;
    }
    let call: PlainToolsCall = serde_json::from_slice(message).ok()?;
    if call.params.meta.is_some() {
        return None;
    }
    Some((call.id, call.params))
}

/// Whether `needle` occurs in `haystack`.
pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcMessage, JsonRpcRequest};

    use super::*;

    /// What rmcp's parse makes of `message`, when it is a `tools/call` without `_meta`.
    fn rmcp_reads(message: &str) -> Option<(RequestId, CallToolRequestParams)> {
        let JsonRpcMessage::Request(JsonRpcRequest { id, request, .. }) =
            serde_json::from_str::<ClientJsonRpcMessage>(message).ok()?
        else {
            return None;
        };
        if !request.get_meta().is_empty() {
            return None;
        }
        match request {
            ClientRequest::CallToolRequest(call) => Some((id, call.params)),
            _ => None,
        }
    }

    #[test]
    fn a_plain_call_reads_as_rmcp_reads_it() {
        let taken = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","arguments":{"mode":"noop"}}}"#,
            r#"{"method":"tools/call","params":{"arguments":{"b":[1,2.5,-3,1e300,null],"a":{"é":"\u00e9\n"}},"name":"p\u0072obe"},"id":"req-7","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":-9007199254740993,"method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","id":"","method":"tools/call","params":{"name":"probe","arguments":null,"extra":1},"more":true}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"probe","requestState":"s","inputResponses":{}}}"#,
            r#" {"jsonrpc" : "2.0", "id" : 4, "method" : "tools\/call", "params" : {"name" : "probe"}} "#,
        ];
        for message in taken {
            let here = plain_tools_call(message.as_bytes());
            assert!(here.is_some(), "taken here: {message}");
            assert_eq!(here, rmcp_reads(message), "{message}");
        }
    }

    #[test]
    fn anything_else_is_left_to_rmcp() {
        let left = [
            // `_meta`, plain or escaped, at any level.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","_meta":{"progressToken":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","\u005fmeta":{"progressToken":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","arguments":{"_meta":1}}}"#,
            // Not a tools/call, not 2.0, no id, no name, or not one well-formed object.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"probe"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe"}} trailing"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe"}}]"#,
        ];
        for message in left {
            assert_eq!(plain_tools_call(message.as_bytes()), None, "{message}");
        }
    }
}
