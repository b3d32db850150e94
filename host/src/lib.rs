//! skillhost: a WebAssembly-sandboxed skill host for AI agents.
//!
//! A skill is a directory with a SKILL.md ([`manifest`]) and, for executable skills, a
//! WebAssembly component built against `wit/`. The [`library`] installs skills, verifies
//! their bytes and runs them in the [`sandbox`], which gives each call only the
//! [`capabilities`] that the skill declares and the user's [`policy`] grants. Skills reach
//! long-term and session [`memory`] through host interfaces, never directly. Every call is
//! recorded in the hash-chained [`audit`] log. The [`agent`] loop lets an LLM pick which
//! skill to call next.

pub mod agent;
pub mod audit;
pub mod authoring;
pub mod bounded;
pub mod bundle;
pub mod capabilities;
pub mod cli;
pub mod config;
pub mod controls;
pub mod fsutil;
pub mod http;
pub mod library;
pub mod lint;
pub mod manifest;
pub mod mcp;
pub mod memory;
pub mod oci;
pub mod policy;
pub mod sandbox;
pub mod search;
pub mod text;
