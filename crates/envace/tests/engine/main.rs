//! The engine's integration tests as one test binary, one suite a module: a clean build links
//! this one executable (plus the MCP binary, which must also be a stdio server) instead of one
//! per suite, each linking candle, tokenizers and rmcp again.
#![allow(clippy::unwrap_used)] // Test code may unwrap: a panic here is the test failing.

/// Runs one test body per compiled device: the CPU always, CUDA in `--features cuda` builds.
macro_rules! test_device {
    ($body:ident, $cpu:ident, $cuda:ident) => {
        #[test]
        fn $cpu() {
            $body(&candle_core::Device::Cpu);
        }

        #[cfg(feature = "cuda")]
        #[test]
        fn $cuda() {
            $body(&candle_core::Device::new_cuda(0).unwrap());
        }
    };
}

mod bfcl_multi;
mod chat;
mod config;
mod endpoints;
mod fuzz_corpus;
mod gguf;
mod layers;
mod loopback;
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
mod toolmetrics;
mod train;
mod verl;
mod vita;
#[cfg(feature = "wgpu")]
mod wgpu;
