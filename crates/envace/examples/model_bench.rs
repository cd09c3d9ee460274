//! Prints the policy layer's throughput figures as JSON (see `envace::model::bench`): tiny
//! Qwen3 training tokens/s, its single-stream and batch-16 decoding, and SmolLM2-135M decoding
//! in Q4_1 and dequantized f32.
//!
//! `cargo run --release -p envace --example model_bench [-- --quick] [--no-smollm2]`

use envace::model::bench::{self, BenchOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut options = BenchOptions::default();
    for arg in &args {
        match arg.as_str() {
            "--quick" => {
                options.n_train_steps = 1;
                options.n_decode_tokens = 16;
            }
            "--no-smollm2" => options.smollm2 = false,
            other => {
                return Err(
                    format!("unknown argument {other:?}; use --quick or --no-smollm2").into(),
                );
            }
        }
    }
    let figures = bench::run(&options)?;
    println!("{}", serde_json::to_string_pretty(&figures)?);
    Ok(())
}
