//! The `envace` command's end-to-end tests as one test binary, one suite a module; each runs
//! the real binary (`CARGO_BIN_EXE_envace`) as a person would.
#![allow(clippy::unwrap_used)] // Test code may unwrap: a panic here is the test failing.

mod bad_inputs;
mod cli;
mod env;
mod eval;
mod mcp_servers;
mod resume;
mod secrets;
mod serve_model;
mod train;
mod verl;
