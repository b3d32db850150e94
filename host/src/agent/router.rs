//! The router: which agent profile handles a request (SPEC section 6, issue 5 item 3).
//!
//! In order: the profile the user asked for (`--agent`), the only profile there is, the one the
//! model picks from the list of names and descriptions, and, when no model is configured or its
//! answer is unusable, a keyword score. The keyword fallback exists so routing never fails
//! because a model is down or sloppy; the [`Route::reason`] says which path decided and why the
//! model was not used, so a surprising route can be explained.

use std::collections::BTreeSet;

use anyhow::{Result, bail};
use serde::Serialize;
use serde_json::Value;

use super::profile::{AgentProfile, GENERAL};
use super::provider::{ChatMessage, ChatRequest, Provider, Purpose, ResponseFormat};
use super::repair::repair_json;
use crate::search::is_cjk;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouteMethod {
    /// `--agent NAME`.
    Requested,
    /// Only one profile exists.
    OnlyProfile,
    /// The model picked it.
    Llm,
    /// Keyword score (no model, or its answer was unusable).
    Keywords,
    /// Nothing matched: `general` (or the first profile).
    Default,
}

impl RouteMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            RouteMethod::Requested => "requested",
            RouteMethod::OnlyProfile => "only-profile",
            RouteMethod::Llm => "llm",
            RouteMethod::Keywords => "keywords",
            RouteMethod::Default => "default",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Route {
    pub profile: String,
    pub method: RouteMethod,
    /// Why this profile: the model's reason, the keywords that matched, and why the model was
    /// not used when it was not.
    pub reason: String,
}

/// Picks the profile for `request` (see the module docs). `requested` is the `--agent` flag and
/// must name a profile; the error lists the names.
pub async fn route(
    request: &str,
    profiles: &[AgentProfile],
    requested: Option<&str>,
    provider: Option<&dyn Provider>,
) -> Result<Route> {
    if let Some(name) = requested {
        if profiles.iter().any(|profile| profile.name == name) {
            return Ok(Route {
                profile: name.to_string(),
                method: RouteMethod::Requested,
                reason: "requested with --agent".to_string(),
            });
        }
        bail!(
            "there is no agent profile `{name}`; the profiles are: {} (add one with `skillhost agent add DIR`)",
            names(profiles)
        );
    }
    match profiles {
        [] => bail!("there are no agent profiles to route to; add one with `skillhost agent add DIR`"),
        [only] => {
            return Ok(Route {
                profile: only.name.clone(),
                method: RouteMethod::OnlyProfile,
                reason: "it is the only profile".to_string(),
            });
        }
        _ => {}
    }
    let why_not_llm = match provider {
        None => "no LLM provider is configured".to_string(),
        Some(provider) => match ask_model(request, profiles, provider).await {
            Ok(route) => return Ok(route),
            Err(why) => why,
        },
    };
    Ok(by_keywords(request, profiles, &format!("LLM not used: {why_not_llm}")))
}

fn names(profiles: &[AgentProfile]) -> String {
    profiles.iter().map(|profile| profile.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// The system prompt of the routing call: the profiles by name and description.
pub fn routing_prompt(profiles: &[AgentProfile]) -> String {
    let mut prompt =
        String::from("You route a user's request to the agent profile best suited to handle it.\n\nProfiles:\n");
    for profile in profiles {
        prompt.push_str(&format!("- {}: {}\n", profile.name, profile.description));
    }
    prompt.push_str(
        "\nAnswer with one JSON object and nothing else: {\"profile\": \"<one of the names above>\", \"reason\": \"<one short sentence>\"}.",
    );
    if profiles.iter().any(|profile| profile.name == GENERAL) {
        prompt.push_str(" If no specialised profile fits, answer \"general\".");
    }
    prompt
}

/// The model's pick, or why it cannot be used (one clause for [`Route::reason`]).
async fn ask_model(request: &str, profiles: &[AgentProfile], provider: &dyn Provider) -> Result<Route, String> {
    let mut chat = ChatRequest::new(
        Purpose::Route,
        ResponseFormat::Json,
        vec![ChatMessage::system(routing_prompt(profiles)), ChatMessage::user(request)],
    );
    chat.temperature = Some(0.0);
    let reply = provider.chat(&chat).await.map_err(|error| format!("the provider failed ({error})"))?;
    let text = reply.text.filter(|text| !text.trim().is_empty()).ok_or("the model's reply had no text")?;
    let answer = repair_json(&text).map_err(|error| format!("the model's reply is not usable JSON ({error})"))?;
    let picked = match answer.get("profile") {
        Some(Value::String(name)) => name.trim().to_string(),
        _ => return Err("the model's reply has no string `profile`".to_string()),
    };
    let Some(profile) = profiles.iter().find(|profile| profile.name.eq_ignore_ascii_case(&picked)) else {
        return Err(format!("the model named `{picked}`, which is not a profile"));
    };
    let reason = match answer.get("reason") {
        Some(Value::String(reason)) if !reason.trim().is_empty() => reason.trim().to_string(),
        _ => "the model picked it (no reason given)".to_string(),
    };
    Ok(Route { profile: profile.name.clone(), method: RouteMethod::Llm, reason })
}

/// Words too common to say anything about a profile when they occur in its description.
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "any", "all", "with", "from", "that", "this", "what", "why", "how", "who", "when", "are",
    "was", "may", "can", "its", "use", "uses", "into", "onto", "not", "but", "you", "your", "does", "did", "has",
    "have", "them", "they", "their", "every", "each",
];

/// Points for a profile keyword in the request; a word of the name or description scores 1.
const KEYWORD_WEIGHT: u32 = 2;

/// The profile whose keywords (and name and description words) occur most in `request`.
/// Latin words match whole words of the request case-insensitively (a trailing plural `s` is
/// ignored); terms with CJK characters match as substrings, since Chinese has no spaces.
/// Ties and no match at all go to `general` when it exists, else to the first candidate.
pub fn by_keywords(request: &str, profiles: &[AgentProfile], prefix: &str) -> Route {
    let lowered = request.to_lowercase();
    let words: BTreeSet<&str> = lowered.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    let phrase = words_joined(&lowered);
    let matches = |term: &str| -> bool {
        let term = term.to_lowercase();
        if term.chars().any(is_cjk) {
            lowered.contains(&term)
        } else if term.contains(|c: char| !c.is_alphanumeric()) {
            let joined = words_joined(&term);
            !joined.is_empty() && format!(" {phrase} ").contains(&format!(" {joined} "))
        } else {
            words.iter().any(|word| *word == term || word.strip_suffix('s') == Some(term.as_str()))
        }
    };
    let mut scored: Vec<(u32, &AgentProfile, Vec<String>)> = profiles
        .iter()
        .map(|profile| {
            let mut hits = Vec::new();
            let mut score = 0;
            let mut seen = BTreeSet::new();
            for keyword in &profile.keywords {
                if seen.insert(keyword.to_lowercase()) && matches(keyword) {
                    score += KEYWORD_WEIGHT;
                    hits.push(keyword.clone());
                }
            }
            let described = profile.name.split('-').chain(profile.description.split(|c: char| !c.is_alphanumeric()));
            for word in described {
                let word = word.to_lowercase();
                let telling = word.chars().count() >= 3 && !STOPWORDS.contains(&word.as_str());
                if telling && !word.chars().any(is_cjk) && seen.insert(word.clone()) && matches(&word) {
                    score += 1;
                    hits.push(word);
                }
            }
            (score, profile, hits)
        })
        .collect();
    // Stable: equal scores keep the profiles' (name) order.
    scored.sort_by_key(|(score, ..)| std::cmp::Reverse(*score));
    let best = scored.first().map_or(0, |(score, ..)| *score);
    let general = profiles.iter().find(|profile| profile.name == GENERAL);
    if best == 0 {
        let name = general.or(profiles.first()).map(|profile| profile.name.clone()).unwrap_or_default();
        return Route {
            profile: name,
            method: RouteMethod::Default,
            reason: format!("{prefix}; no profile's keywords occur in the request"),
        };
    }
    let tied: Vec<&str> =
        scored.iter().filter(|(score, ..)| *score == best).map(|(_, profile, _)| profile.name.as_str()).collect();
    if tied.len() > 1 {
        let (profile, method) = match general {
            Some(general) => (general.name.clone(), RouteMethod::Default),
            None => (tied[0].to_string(), RouteMethod::Keywords),
        };
        return Route {
            profile,
            method,
            reason: format!("{prefix}; keyword scores tie at {best} between {}", tied.join(", ")),
        };
    }
    let (profile, hits) =
        scored.first().map(|(_, profile, hits)| (profile.name.clone(), hits.join(", "))).unwrap_or_default();
    Route {
        profile,
        method: RouteMethod::Keywords,
        reason: format!("{prefix}; keywords matched: {hits} (score {best})"),
    }
}

fn words_joined(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::agent::profile::{builtin_general, parse_profile};
    use crate::agent::provider::scripted::ScriptedProvider;

    fn analyst() -> AgentProfile {
        parse_profile(
            "log-analyst",
            "---\ndescription: Finds root causes in device logs\nkeywords: [uart, garbage, 串口, 乱码]\n---\n## Identity\nanalyst\n",
            None,
        )
        .unwrap()
    }

    fn writer() -> AgentProfile {
        parse_profile(
            "release-writer",
            "---\ndescription: Writes release notes and changelogs\nkeywords: [changelog, release notes, 发布]\n---\n## Identity\nwriter\n",
            None,
        )
        .unwrap()
    }

    fn profiles() -> Vec<AgentProfile> {
        vec![builtin_general(), analyst(), writer()]
    }

    fn scripted(route: &str) -> ScriptedProvider {
        ScriptedProvider::parse(Path::new("d.json"), &serde_json::json!({ "route": [route] }).to_string()).unwrap()
    }

    async fn routed(request: &str, provider: Option<&dyn Provider>) -> Route {
        route(request, &profiles(), None, provider).await.unwrap()
    }

    #[tokio::test]
    async fn requested_wins_and_unknown_lists_names() {
        let provider = scripted(r#"{"profile": "release-writer"}"#);
        let r = route("uart garbage", &profiles(), Some("general"), Some(&provider)).await.unwrap();
        assert_eq!((r.profile.as_str(), r.method), ("general", RouteMethod::Requested));
        let e = route("x", &profiles(), Some("nope"), None).await.unwrap_err().to_string();
        assert!(e.contains("`nope`") && e.contains("general, log-analyst, release-writer"), "{e}");
    }

    #[tokio::test]
    async fn only_profile_needs_no_model() {
        let r = route("anything", &[analyst()], None, None).await.unwrap();
        assert_eq!((r.profile.as_str(), r.method), ("log-analyst", RouteMethod::OnlyProfile));
    }

    #[tokio::test]
    async fn model_pick_is_used_with_its_reason() {
        let provider = scripted("```json\n{\"profile\": \"Release-Writer\", \"reason\": \"notes\",}\n```");
        let r = routed("please summarise", Some(&provider)).await;
        assert_eq!((r.profile.as_str(), r.method, r.reason.as_str()), ("release-writer", RouteMethod::Llm, "notes"));
    }

    #[tokio::test]
    async fn unusable_model_answers_fall_back_to_keywords() {
        for (reply, says) in [
            (r#"{"profile": "poet"}"#, "`poet`, which is not a profile"),
            ("sure, the log one", "not usable JSON"),
            (r#"{"name": "log-analyst"}"#, "no string `profile`"),
        ] {
            let provider = scripted(reply);
            let r = routed("UART prints garbage", Some(&provider)).await;
            assert_eq!((r.profile.as_str(), r.method), ("log-analyst", RouteMethod::Keywords), "{reply}");
            assert!(r.reason.starts_with("LLM not used: ") && r.reason.contains(says), "{}", r.reason);
        }
        // An exhausted script is a provider error.
        let provider = ScriptedProvider::parse(Path::new("d.json"), "{}").unwrap();
        let r = routed("uart garbage", Some(&provider)).await;
        assert!(r.reason.contains("the provider failed") && r.reason.contains("d.json"), "{}", r.reason);
    }

    #[tokio::test]
    async fn keywords_cjk_phrases_plurals_ties_and_default() {
        let r = routed("为什么串口偶尔输出乱码？", None).await;
        assert_eq!((r.profile.as_str(), r.method), ("log-analyst", RouteMethod::Keywords));
        assert!(
            r.reason.contains("no LLM provider") && r.reason.contains("串口") && r.reason.contains("乱码"),
            "{}",
            r.reason
        );
        assert_eq!(routed("draft the Release Notes for 2.0", None).await.profile, "release-writer");
        assert_eq!(routed("check the logs", None).await.profile, "log-analyst");
        let r = routed("what is the weather", None).await;
        assert_eq!((r.profile.as_str(), r.method), ("general", RouteMethod::Default));
        let r = routed("uart changelog", None).await;
        assert_eq!((r.profile.as_str(), r.method), ("general", RouteMethod::Default));
        assert!(r.reason.contains("tie"), "{}", r.reason);
        // Without `general`, a tie goes to the first of the tied profiles.
        let r = route("uart changelog", &[analyst(), writer()], None, None).await.unwrap();
        assert_eq!(r.profile, "log-analyst");
    }
}
