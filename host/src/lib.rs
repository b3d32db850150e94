//! skillhost: a WebAssembly-sandboxed skill host for AI agents.
//!
//! A skill is a directory with a SKILL.md ([`manifest`]) and, for executable skills, a
//! WebAssembly component built against `wit/`. The [`library`] installs skills, verifies
//! their bytes and runs them in the [`sandbox`], which gives each call only the
//! [`capabilities`] that the skill declares and the user's [`policy`] grants. Skills reach
//! long-term and session [`memory`] through host interfaces, never directly. Every call is
//! recorded in the hash-chained [`audit`] log. The [`agent`] loop lets an LLM pick which
//! skill to call next; [`mcp`] serves the skills to MCP clients. The system of record is
//! the home, or a PostgreSQL database shared by several hosts ([`store`]).
//!
//! What an embedder uses: [`library::Library`] (install, run, search, memory), the
//! [`policy`] and [`capabilities`] it decides with, [`sandbox::Runtime`] for calls without
//! a home, [`memory::Memory`], [`audit::AuditLog`], [`agent`], [`mcp`], signed skills
//! from registries ([`oci`], [`bundle`]) and skill authoring ([`authoring`]). The modules
//! marked hidden serve the `skillhost` binary and the test suites; they are not an API.

pub mod agent;
pub mod audit;
pub mod authoring;
pub mod bundle;
pub mod capabilities;
pub mod config;
pub mod library;
pub mod manifest;
pub mod mcp;
pub mod memory;
pub mod oci;
pub mod policy;
pub mod sandbox;
pub mod store;

// The binary's command line, and helpers the test suites reach into.
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod fsutil;
#[doc(hidden)]
pub mod http;
#[doc(hidden)]
pub mod search;

mod bounded;
mod controls;
mod lint;
mod text;
