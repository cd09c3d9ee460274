//! The engine's integration tests as one test binary, one suite a module: a clean build links
//! this one executable (plus the MCP binary, which must also be a stdio server) instead of one
//! per suite, each linking candle, tokenizers and rmcp again.
#![allow(clippy::unwrap_used)] // Test code may unwrap: a panic here is the test failing.

mod chat;
mod config;
mod endpoints;
mod gguf;
mod layers;
mod model;
mod openai_client;
mod rehearsal_eval;
mod rl_phase;
mod rollout;
mod serve;
mod store;
mod tasks;
mod tau2;
mod tokenize;
mod train;
