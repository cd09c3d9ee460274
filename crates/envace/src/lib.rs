//! The EnvACE engine library: everything a run needs, with no GUI dependency.
//!
//! The studio, the monitor and the `envace` command line are thin layers over this crate.
//! Data flows one way: config → controller → rollouts and training → run store; see
//! `ARCHITECTURE.md` for the map. Modules land here as their issues bring real content.

pub mod bench;
#[cfg(feature = "wgpu")]
pub mod bench_wgpu;
pub mod chat;
pub mod config;
pub mod controller;
pub mod crash;
pub mod env;
pub mod error;
pub mod eval;
pub mod fidelity;
pub mod fsutil;
pub mod fuzzing;
pub mod judge;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod openai;
pub mod rehearse;
pub mod rl;
pub mod rng;
pub mod rollout;
pub mod runtime;
pub mod serve;
pub mod store;
pub mod tasks;
pub mod tokenize;
pub mod trust;
pub mod verl;

pub use error::{Error, Result};
