//! The agent loop (SPEC section 6): each step an LLM picks the next action, the host carries
//! it out in the sandbox and feeds the result back.
//!
//! The loop talks to models only through [`provider::Provider`], so OpenAI-compatible servers,
//! Anthropic and the scripted replay used by tests and offline demos are interchangeable, and
//! every transport failure reaches the loop as one [`provider::ProviderError`] sentence.
//! [`repair`] turns what a model answered into one JSON action (or a sentence to re-ask
//! with); [`guardrail`] checks the final answer against the evidence the skills returned.

pub mod context;
pub mod executor;
pub mod guardrail;
pub mod profile;
pub mod provider;
pub mod repair;
pub mod router;
pub mod run;
