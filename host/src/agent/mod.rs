//! The agent loop (SPEC section 6). So far the pieces that need no model: repairing the
//! JSON a model answers with ([`repair`]) and checking its final answer against the
//! evidence the skills returned ([`guardrail`]).

pub mod guardrail;
pub mod repair;
