//! Measures policy training and decoding throughput on the CPU at the size `shared/STACK.md`
//! benchmarks (Qwen3-style, hidden 256, 4 layers, vocab 4096, batch 8 × 256 tokens).
//!
//! `cargo run -p envace --example policy_throughput [-- --steps N]`

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use envace::config::Architecture;
use envace::model::{Policy, TransformerConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n_steps: usize = match args.iter().position(|a| a == "--steps") {
        Some(idx) => args.get(idx + 1).ok_or("--steps needs a number")?.parse()?,
        None => 5,
    };
    let device = Device::Cpu;
    let cfg = TransformerConfig {
        architecture: Architecture::Qwen3,
        vocab_size: 4096,
        hidden_size: 256,
        intermediate_size: 768,
        n_layers: 4,
        n_heads: 4,
        n_kv_heads: 4,
        head_dim: 64,
        max_position_embeddings: 1024,
        rope_theta: 10_000.0,
        rope_scaling: None,
        rms_norm_eps: 1e-6,
        tie_word_embeddings: true,
        initializer_range: 0.02,
        bos_token_id: None,
        eos_token_ids: Vec::new(),
    };
    let vocab = cfg.vocab_size as u32;
    let policy = Policy::init(cfg, 0, &device, DType::F32)?;
    println!("{} parameters", policy.n_params());

    let (batch, seq) = (8usize, 256usize);
    let tokens: Vec<u32> = (0..batch * (seq + 1))
        .map(|i| (i as u32).wrapping_mul(2_654_435_761) % vocab)
        .collect();
    let all = Tensor::from_vec(tokens, (batch, seq + 1), &device)?;
    let input = all.narrow(1, 0, seq)?;
    let labels = all.narrow(1, 1, seq)?.contiguous()?;
    let mut opt = AdamW::new(policy.trainable_vars(), ParamsAdamW::default())?;
    let mut step = |policy: &Policy| -> Result<[f64; 4], Box<dyn std::error::Error>> {
        let t0 = Instant::now();
        let logits = policy.forward_train(&input, None)?;
        let loss = candle_nn::loss::cross_entropy(&logits.flatten_to(1)?, &labels.flatten_all()?)?;
        let t1 = Instant::now();
        let grads = loss.backward()?;
        let t2 = Instant::now();
        opt.step(&grads)?;
        let t3 = Instant::now();
        let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
        Ok([
            secs(t0, t1),
            secs(t1, t2),
            secs(t2, t3),
            f64::from(loss.to_scalar::<f32>()?),
        ])
    };
    step(&policy)?;
    let mut totals = [0.0; 3];
    let mut loss = 0.0;
    for _ in 0..n_steps {
        let [forward, backward, update, step_loss] = step(&policy)?;
        totals[0] += forward;
        totals[1] += backward;
        totals[2] += update;
        loss = step_loss;
    }
    let secs: f64 = totals.iter().sum();
    println!(
        "train: {n_steps} steps of {batch}x{seq} in {secs:.2} s (forward {:.2}, backward {:.2}, AdamW {:.2}): {:.0} tokens/s (loss {loss:.3})",
        totals[0],
        totals[1],
        totals[2],
        (n_steps * batch * seq) as f64 / secs
    );

    let n_new = 256;
    for batch in [1usize, 8] {
        let prompts: Vec<Vec<u32>> = (0..batch)
            .map(|row| (0..16).map(|i| (row as u32 * 31 + i * 7) % vocab).collect())
            .collect();
        policy.generate_greedy(&prompts, 4, &[])?;
        let start = Instant::now();
        let out = policy.generate_greedy(&prompts, n_new, &[])?;
        let secs = start.elapsed().as_secs_f64();
        let n_tokens: usize = out.iter().map(Vec::len).sum();
        println!(
            "decode: batch {batch}, {n_tokens} tokens in {secs:.2} s: {:.0} tokens/s",
            n_tokens as f64 / secs
        );
    }
    Ok(())
}
