//! The agent loop (SPEC section 6). So far the pieces that need no model: repairing the
//! JSON a model answers with ([`repair`]).

pub mod repair;
