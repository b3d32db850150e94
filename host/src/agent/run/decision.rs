//! Reading the model's reply into one [`Action`]: a native tool call, or a JSON action object
//! (repaired when it is almost one).

use serde_json::Value;

use super::super::context::{REPLY_TOOL, REQUIRE_MORE_TOOL};
use super::super::provider::ChatReply;
use super::super::repair::repair_json;

/// One action, as decided by the model.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    CallSkill { skill: String, params: Value },
    Reply { message: String },
    RequireMore { question: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub reasoning: String,
    pub action: Action,
}

/// The action in a reply, and whether it needed repair; `Err` is the problem, for the model.
pub fn interpret(reply: &ChatReply) -> Result<(Decision, bool), String> {
    if let Some(call) = reply.tool_calls.first() {
        let reasoning = reply.text.clone().unwrap_or_default();
        let (arguments, repaired) = parse_object(&call.arguments)
            .map_err(|e| format!("the arguments of your `{}` call are not usable JSON: {e}", call.name))?;
        let text = |key: &str| arguments.get(key).and_then(Value::as_str).map(str::to_string);
        let action = match call.name.as_str() {
            REPLY_TOOL => Action::Reply {
                message: text("message")
                    .filter(|m| !m.trim().is_empty())
                    .ok_or("`reply` needs a non-empty string `message` with the final answer")?,
            },
            REQUIRE_MORE_TOOL => Action::RequireMore {
                question: text("question")
                    .filter(|q| !q.trim().is_empty())
                    .ok_or("`require_more` needs a non-empty string `question`")?,
            },
            skill => Action::CallSkill { skill: skill.to_string(), params: arguments },
        };
        return Ok((Decision { reasoning, action }, repaired));
    }
    let text = reply.text.as_deref().unwrap_or("");
    let (value, repaired) = parse_object(text)?;
    Ok((action_of(&value)?, repaired))
}

fn parse_object(text: &str) -> Result<(Value, bool), String> {
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(v @ Value::Object(_)) => Ok((v, false)),
        _ => repair_json(text).map(|v| (v, true)).map_err(|e| e.to_string()),
    }
}

/// The action an action object describes.
pub fn action_of(value: &Value) -> Result<Decision, String> {
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let reasoning = text("reasoning").unwrap_or("").to_string();
    let message = text("message");
    let action = match text("next_action") {
        Some("call_skill") => {
            let skill =
                text("skill_name").ok_or("`call_skill` needs `skill_name`: the name of a skill from the catalog")?;
            let params = match value.get("parameters") {
                None | Some(Value::Null) => Value::Object(Default::default()),
                // Some models put the object in a string.
                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
                Some(other) => other.clone(),
            };
            Action::CallSkill { skill: skill.to_string(), params }
        }
        Some("reply") => Action::Reply {
            message: message.ok_or("`reply` needs `message`: the final answer for the user")?.to_string(),
        },
        Some("require_more") => Action::RequireMore {
            question: message.ok_or("`require_more` needs `message`: the question for the user")?.to_string(),
        },
        Some(other) => return Err(format!("`next_action` is `{other}`; it must be call_skill, reply or require_more")),
        None => return Err("the object has no `next_action` (call_skill, reply or require_more)".to_string()),
    };
    Ok(Decision { reasoning, action })
}
