//! Throughput measurements of the policy layer and its training step (above every layer: it
//! drives `model` with `rl`'s AdamW), as JSON-ready figures for `cargo xtask bench
//! model`: training tokens/s of the default tiny Qwen3, batched against single-stream decoding
//! of the same model, and SmolLM2-135M decoding kept in Q4_1 and dequantized to f32.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use crate::config::TinyModelConfig;
use crate::error::{Error, Result};
use crate::model::{Gguf, Policy, QuantizedLlama, Sampling, TransformerConfig};

/// Timed runs of each decode measurement (after a warm-up); the fastest counts, since the
/// machine may be shared and a run that another process interrupted says nothing about ours.
pub const DECODE_REPEATS: usize = 3;

/// Rounds of the batched decode and the prompt pass that its ratio compares: each round times
/// one of each, back to back, and the fastest of each counts. Measured one after the other,
/// a neighbour's load that came and went between them moved the ratio by ±10% on a shared VM;
/// alternating gives both the same quiet moments.
pub const RATIO_ROUNDS: usize = 10;

/// Tokens per row of the prompt pass that gives the machine's dense rate on the tiny model.
pub const PROMPT_PASS_LEN: usize = 128;

/// What to measure and how long.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    /// Timed AdamW steps (after one warm-up step).
    pub n_train_steps: usize,
    /// Rows of a training batch.
    pub train_batch: usize,
    /// Tokens per training row.
    pub train_seq_len: usize,
    /// New tokens per decoded row.
    pub n_decode_tokens: usize,
    /// Rows of the batched decode (compared with one row).
    pub decode_batch: usize,
    /// Also measure SmolLM2 (needs its GGUF in the cache folder).
    pub smollm2: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            // PyTorch keeps speeding up for several steps after its one warm-up step (oneDNN
            // picks and caches its kernels): over 5 timed steps it measured 4,690 tokens/s
            // where 30 gave 6,129 on the same machine, while ours was flat (4,249 and 4,166).
            // 30 steps time both sides in their steady state.
            n_train_steps: 30,
            train_batch: 8,
            train_seq_len: 256,
            n_decode_tokens: 64,
            decode_batch: 16,
            smollm2: true,
        }
    }
}

/// Training throughput.
#[derive(Debug, Clone, Serialize)]
pub struct TrainFigures {
    /// Model parameters.
    pub n_params: usize,
    /// Timed steps.
    pub n_steps: usize,
    /// Rows × tokens per step.
    pub batch: usize,
    /// Tokens per row.
    pub seq_len: usize,
    /// Mean seconds per step in the forward pass, the backward pass and the AdamW update.
    pub forward_secs: f64,
    /// See `forward_secs`.
    pub backward_secs: f64,
    /// See `forward_secs`.
    pub update_secs: f64,
    /// Trained tokens per second over whole steps.
    pub tokens_per_sec: f64,
    /// Loss after the last step.
    pub final_loss: f64,
}

/// Decoding throughput of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeFigures {
    /// What was decoded, e.g. `tiny-qwen3 f32` or `smollm2-135m q4_1`.
    pub model: String,
    /// Rows decoded together.
    pub batch: usize,
    /// Prompt tokens per row.
    pub prompt_len: usize,
    /// New tokens over all rows.
    pub n_tokens: usize,
    /// Seconds for prompt and decoding together: the fastest of [`DECODE_REPEATS`] runs, or of
    /// [`RATIO_ROUNDS`] for the batched decode that [`run`] compares with the prompt pass.
    pub secs: f64,
    /// New tokens per second over all rows.
    pub tokens_per_sec: f64,
    /// Multiply-adds per second of the whole run, prompt pass included
    /// ([`decode_multiply_adds`]); not counted for the quantized model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multiply_adds_per_sec: Option<f64>,
    /// The decoded ids, for single-row runs that a peer reproduces (compared token by token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Vec<u32>>,
}

/// A prompt pass: `batch` rows of `prompt_len` tokens through a fresh KV cache in one forward
/// (what generation does before its first token), the machine's dense rate on this model.
#[derive(Debug, Clone, Serialize)]
pub struct PromptPassFigures {
    /// Rows.
    pub batch: usize,
    /// Tokens per row.
    pub prompt_len: usize,
    /// Seconds of one pass: the fastest of [`DECODE_REPEATS`], or of [`RATIO_ROUNDS`] in
    /// [`run`].
    pub secs: f64,
    /// Prompt tokens per second.
    pub tokens_per_sec: f64,
    /// Multiply-adds per second ([`prompt_multiply_adds`]).
    pub multiply_adds_per_sec: f64,
}

/// Multiply-adds of one token through every layer's weight matrices (the attention projections
/// and the SwiGLU), without attention over the context and without the vocabulary head.
fn layer_weight_multiply_adds(cfg: &TransformerConfig) -> f64 {
    let (hidden, inter) = (cfg.hidden_size as f64, cfg.intermediate_size as f64);
    let q = (cfg.n_heads * cfg.head_dim) as f64;
    let kv = (cfg.n_kv_heads * cfg.head_dim) as f64;
    cfg.n_layers as f64 * (2.0 * hidden * q + 2.0 * hidden * kv + 3.0 * hidden * inter)
}

/// Multiply-adds of one token's attention over `context` keys in every layer (scores and the
/// weighted sum of values).
fn attention_multiply_adds(cfg: &TransformerConfig, context: usize) -> f64 {
    (cfg.n_layers * cfg.n_heads * cfg.head_dim * context * 2) as f64
}

/// Multiply-adds of one row's vocabulary head.
fn head_multiply_adds(cfg: &TransformerConfig) -> f64 {
    (cfg.hidden_size * cfg.vocab_size) as f64
}

/// Multiply-adds of a prompt pass of `batch` rows of `prompt_len` tokens: every token through
/// the layers with causal attention, the head on each row's last position only (as
/// [`Policy::forward_cached`] does).
pub fn prompt_multiply_adds(cfg: &TransformerConfig, batch: usize, prompt_len: usize) -> f64 {
    let per_row: f64 = (1..=prompt_len)
        .map(|context| layer_weight_multiply_adds(cfg) + attention_multiply_adds(cfg, context))
        .sum::<f64>()
        + head_multiply_adds(cfg);
    batch as f64 * per_row
}

/// Multiply-adds of generating `n_new` tokens per row after a `prompt_len` prompt: the prompt
/// pass (which yields the first token), then one single-token forward per further token, each
/// through the layers, attention over everything before it, and the head.
pub fn decode_multiply_adds(
    cfg: &TransformerConfig,
    batch: usize,
    prompt_len: usize,
    n_new: usize,
) -> f64 {
    let steps: f64 = (1..n_new)
        .map(|i| {
            layer_weight_multiply_adds(cfg)
                + attention_multiply_adds(cfg, prompt_len + i)
                + head_multiply_adds(cfg)
        })
        .sum();
    prompt_multiply_adds(cfg, batch, prompt_len) + batch as f64 * steps
}

/// One prompt pass of `batch` rows of `prompt_len` pseudo-random tokens, timed (the fastest of
/// [`DECODE_REPEATS`] after a warm-up).
pub fn bench_prompt_pass(
    policy: &Policy,
    batch: usize,
    prompt_len: usize,
) -> Result<PromptPassFigures> {
    let pass = PromptPass::new(policy, batch, prompt_len)?;
    pass.run()?;
    let mut secs = f64::INFINITY;
    for _ in 0..DECODE_REPEATS {
        secs = secs.min(pass.run()?);
    }
    Ok(pass.figures(secs))
}

/// A prompt pass ready to run: its input ids.
struct PromptPass<'a> {
    policy: &'a Policy,
    input: Tensor,
    batch: usize,
    prompt_len: usize,
}

impl<'a> PromptPass<'a> {
    fn new(policy: &'a Policy, batch: usize, prompt_len: usize) -> Result<Self> {
        let vocab = policy.config().vocab_size as u32;
        let ids: Vec<u32> = (0..(batch * prompt_len) as u32)
            .map(|i| (i * 7 + 3) % vocab)
            .collect();
        let input = Tensor::from_vec(ids, (batch, prompt_len), policy.device())
            .map_err(|e| Error::candle("prompt pass input", e))?;
        Ok(PromptPass {
            policy,
            input,
            batch,
            prompt_len,
        })
    }

    /// Seconds of one pass through a fresh KV cache.
    fn run(&self) -> Result<f64> {
        let start = Instant::now();
        let mut cache = crate::model::KvCache::new();
        // As generation runs its prompt: with the pool's workers kept awake.
        let logits = crate::model::with_workers_awake(self.policy.device(), || {
            self.policy.forward_cached(&self.input, None, &mut cache)
        })?;
        self.policy
            .device()
            .synchronize()
            .map_err(|e| Error::candle("prompt pass", e))?;
        drop(logits);
        Ok(start.elapsed().as_secs_f64())
    }

    fn figures(&self, secs: f64) -> PromptPassFigures {
        let tokens = (self.batch * self.prompt_len) as f64;
        PromptPassFigures {
            batch: self.batch,
            prompt_len: self.prompt_len,
            secs,
            tokens_per_sec: tokens / secs.max(1e-9),
            multiply_adds_per_sec: prompt_multiply_adds(
                self.policy.config(),
                self.batch,
                self.prompt_len,
            ) / secs.max(1e-9),
        }
    }
}

/// The sizes of the trained model, as a peer needs them to build the same one.
#[derive(Debug, Clone, Serialize)]
pub struct ModelShape {
    /// `qwen3` (with per-head q/k RMSNorm) or `llama`.
    pub architecture: crate::config::Architecture,
    /// Rows of the (tied) embedding.
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU layer.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub n_layers: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RoPE base frequency.
    pub rope_theta: f64,
    /// Epsilon of every RMSNorm.
    pub rms_norm_eps: f64,
    /// Standard deviation of the normal initialisation.
    pub initializer_range: f64,
    /// The head reuses the embedding.
    pub tie_word_embeddings: bool,
}

impl ModelShape {
    fn of(cfg: &TransformerConfig) -> Self {
        ModelShape {
            architecture: cfg.architecture,
            vocab_size: cfg.vocab_size,
            hidden_size: cfg.hidden_size,
            intermediate_size: cfg.intermediate_size,
            n_layers: cfg.n_layers,
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
            rope_theta: cfg.rope_theta,
            rms_norm_eps: cfg.rms_norm_eps,
            initializer_range: cfg.initializer_range,
            tie_word_embeddings: cfg.tie_word_embeddings,
        }
    }
}

/// Everything [`run`] measures.
#[derive(Debug, Clone, Serialize)]
pub struct ModelBench {
    /// Threads candle's CPU kernels use.
    pub n_threads: usize,
    /// The vector extensions our CPU kernels ran with (`ENVACE_SIMD` applied).
    pub simd: &'static str,
    /// Whether candle's matrix products (the `gemm` crate) were built with their AVX-512
    /// kernels (the `avx512` feature); they pick AVX-512 at run time only on a CPU with it.
    pub gemm_avx512_compiled: bool,
    /// The tiny Qwen3 that is trained and decoded.
    pub tiny_config: ModelShape,
    /// Training of the default tiny Qwen3 (`[model.tiny]` defaults).
    pub tiny_train: TrainFigures,
    /// Decoding of the same model, one row and `decode_batch` rows.
    pub tiny_decode: Vec<DecodeFigures>,
    /// A prompt pass of the same model: `decode_batch` rows of [`PROMPT_PASS_LEN`] tokens.
    pub tiny_prompt_pass: PromptPassFigures,
    /// SmolLM2-135M-Instruct decoding, Q4_1 and dequantized f32 (empty when not asked for).
    pub smollm2_decode: Vec<DecodeFigures>,
    /// The prompt ids SmolLM2 decodes from (empty when not asked for).
    pub smollm2_prompt: Vec<u32>,
}

/// The SmolLM2 prompt: 32 fixed ids spread over the vocabulary.
pub fn smollm2_prompt() -> Vec<u32> {
    (0..32u32).map(|i| 100 + i * 37).collect()
}

/// The `[model.tiny]` default model (Qwen3, hidden 256, 4 layers, vocab 4096).
pub fn tiny_default_config() -> Result<TransformerConfig> {
    TransformerConfig::from_tiny(&TinyModelConfig::default())
}

fn candle(context: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| Error::candle(context, e)
}

/// Next-token cross-entropy AdamW steps on fixed pseudo-random tokens: one warm-up step, then
/// `n_steps` timed ones.
pub fn bench_train(
    policy: &Policy,
    batch: usize,
    seq_len: usize,
    n_steps: usize,
) -> Result<TrainFigures> {
    let ctx = "training benchmark";
    let vocab = policy.config().vocab_size as u64;
    let tokens: Vec<u32> = (0..batch * (seq_len + 1))
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % vocab) as u32)
        .collect();
    let all =
        Tensor::from_vec(tokens, (batch, seq_len + 1), policy.device()).map_err(candle(ctx))?;
    let input = all.narrow(1, 0, seq_len).map_err(candle(ctx))?;
    let labels = all
        .narrow(1, 1, seq_len)
        .and_then(|t| t.flatten_all())
        .map_err(candle(ctx))?;
    // The optimizer our training runs (its gradient norm included; no clipping here).
    let mut opt = crate::rl::AdamW::new(policy, 0.01)?;
    let mut step = || -> Result<[f64; 4]> {
        // A GPU runs ops asynchronously: each phase ends when the device has finished it (on
        // the CPU `synchronize` returns at once).
        let sync = || policy.device().synchronize().map_err(candle(ctx));
        let t0 = Instant::now();
        // Cross-entropy as our training computes token log-probabilities.
        let (logp, _) = policy.train_token_stats(&input, None, None, &labels, false)?;
        let loss = logp
            .mean_all()
            .and_then(|mean| mean.neg())
            .map_err(candle(ctx))?;
        sync()?;
        let t1 = Instant::now();
        let grads = loss.backward().map_err(candle(ctx))?;
        sync()?;
        let t2 = Instant::now();
        opt.step(&grads, 1e-3, 0.0, 1.0)?;
        sync()?;
        let t3 = Instant::now();
        let loss = loss.to_scalar::<f32>().map_err(candle(ctx))?;
        Ok([
            (t1 - t0).as_secs_f64(),
            (t2 - t1).as_secs_f64(),
            (t3 - t2).as_secs_f64(),
            f64::from(loss),
        ])
    };
    crate::model::with_workers_awake(policy.device(), &mut step)?;
    let mut totals = [0.0; 3];
    let mut final_loss = f64::NAN;
    for _ in 0..n_steps {
        // As SFT and GRPO run a step: with the pool's workers kept awake.
        let [forward, backward, update, loss] =
            crate::model::with_workers_awake(policy.device(), &mut step)?;
        totals[0] += forward;
        totals[1] += backward;
        totals[2] += update;
        final_loss = loss;
    }
    let n = n_steps.max(1) as f64;
    let secs: f64 = totals.iter().sum();
    Ok(TrainFigures {
        n_params: policy.n_params(),
        n_steps,
        batch,
        seq_len,
        forward_secs: totals[0] / n,
        backward_secs: totals[1] / n,
        update_secs: totals[2] / n,
        tokens_per_sec: (n_steps * batch * seq_len) as f64 / secs.max(1e-9),
        final_loss,
    })
}

/// Decoding of `batch` rows of `prompt_len` pseudo-random tokens with `sampling` (greedy in the
/// benchmark; RL rollouts sample at temperature 1), `n_new` tokens each, with no stop token
/// (after a short warm-up).
pub fn bench_decode(
    policy: &Policy,
    model: &str,
    batch: usize,
    prompt_len: usize,
    n_new: usize,
    sampling: &Sampling,
) -> Result<DecodeFigures> {
    let decode = Decode::new(policy, batch, prompt_len, n_new, sampling)?;
    let mut best = None;
    for _ in 0..DECODE_REPEATS {
        decode.keep_faster(&mut best, decode.run()?);
    }
    Ok(decode.figures(model, best))
}

/// A batched decode and a prompt pass of the same model timed in [`RATIO_ROUNDS`] alternating
/// rounds (after a warm-up of each), the fastest of each: the two sides of the benchmark's
/// batched-decode ratio.
pub fn bench_decode_against_prompt_pass(
    policy: &Policy,
    model: &str,
    batch: usize,
    prompt_len: usize,
    n_new: usize,
    pass_len: usize,
) -> Result<(DecodeFigures, PromptPassFigures)> {
    let sampling = Sampling::greedy();
    let decode = Decode::new(policy, batch, prompt_len, n_new, &sampling)?;
    let pass = PromptPass::new(policy, batch, pass_len)?;
    pass.run()?;
    let (mut best, mut pass_secs) = (None, f64::INFINITY);
    for _ in 0..RATIO_ROUNDS {
        decode.keep_faster(&mut best, decode.run()?);
        pass_secs = pass_secs.min(pass.run()?);
    }
    Ok((decode.figures(model, best), pass.figures(pass_secs)))
}

/// A decode ready to run: its prompts (warmed up once).
struct Decode<'a> {
    policy: &'a Policy,
    prompts: Vec<Vec<u32>>,
    prompt_len: usize,
    n_new: usize,
    sampling: &'a Sampling,
}

impl<'a> Decode<'a> {
    fn new(
        policy: &'a Policy,
        batch: usize,
        prompt_len: usize,
        n_new: usize,
        sampling: &'a Sampling,
    ) -> Result<Self> {
        let vocab = policy.config().vocab_size as u32;
        let prompts: Vec<Vec<u32>> = (0..batch as u32)
            .map(|row| {
                (0..prompt_len as u32)
                    .map(|i| (row * 31 + i * 7 + 1) % vocab)
                    .collect()
            })
            .collect();
        policy.generate(&prompts, 2, &[], sampling)?;
        Ok(Decode {
            policy,
            prompts,
            prompt_len,
            n_new,
            sampling,
        })
    }

    /// Seconds of one generation and its tokens.
    fn run(&self) -> Result<(f64, Vec<Vec<u32>>)> {
        let start = Instant::now();
        let out: Vec<Vec<u32>> = self
            .policy
            .generate(&self.prompts, self.n_new, &[], self.sampling)?
            .into_iter()
            .map(|g| g.tokens)
            .collect();
        Ok((start.elapsed().as_secs_f64(), out))
    }

    fn keep_faster(&self, best: &mut Option<(f64, Vec<Vec<u32>>)>, run: (f64, Vec<Vec<u32>>)) {
        if best
            .as_ref()
            .is_none_or(|(best_secs, _)| run.0 < *best_secs)
        {
            *best = Some(run);
        }
    }

    fn figures(&self, model: &str, best: Option<(f64, Vec<Vec<u32>>)>) -> DecodeFigures {
        let batch = self.prompts.len();
        let (secs, out) = best.unwrap_or_default();
        let n_tokens = out.iter().map(Vec::len).sum();
        let multiply_adds =
            decode_multiply_adds(self.policy.config(), batch, self.prompt_len, self.n_new);
        DecodeFigures {
            model: model.to_owned(),
            batch,
            prompt_len: self.prompt_len,
            n_tokens,
            secs,
            tokens_per_sec: n_tokens as f64 / secs.max(1e-9),
            multiply_adds_per_sec: Some(multiply_adds / secs.max(1e-9)),
            tokens: (batch == 1).then(|| out.into_iter().flatten().collect()),
        }
    }
}

/// Greedy decoding of one prompt with the quantized model.
pub fn bench_quantized_decode(
    quantized: &mut QuantizedLlama,
    model: &str,
    prompt: &[u32],
    n_new: usize,
) -> Result<DecodeFigures> {
    quantized.generate_greedy(prompt, 2, &[])?;
    let mut best = None;
    for _ in 0..DECODE_REPEATS {
        let start = Instant::now();
        let out = quantized.generate_greedy(prompt, n_new, &[])?;
        let secs = start.elapsed().as_secs_f64();
        if best.as_ref().is_none_or(|(best_secs, _)| secs < *best_secs) {
            best = Some((secs, out));
        }
    }
    let (secs, out) = best.unwrap_or_default();
    Ok(DecodeFigures {
        model: model.to_owned(),
        batch: 1,
        prompt_len: prompt.len(),
        n_tokens: out.len(),
        secs,
        tokens_per_sec: out.len() as f64 / secs.max(1e-9),
        multiply_adds_per_sec: None,
        tokens: Some(out),
    })
}

/// The default tiny Qwen3 on `device`: its training, and its greedy decoding of one row (the
/// callers add the batched decode, each in its own way).
fn tiny_figures(
    options: &BenchOptions,
    device: &Device,
) -> Result<(Policy, TrainFigures, Vec<DecodeFigures>)> {
    let tiny = Policy::init(tiny_default_config()?, 0, device, DType::F32)?;
    let train = bench_train(
        &tiny,
        options.train_batch,
        options.train_seq_len,
        options.n_train_steps,
    )?;
    let single = bench_decode(
        &tiny,
        TINY_NAME,
        1,
        TINY_PROMPT_LEN,
        options.n_decode_tokens,
        &Sampling::greedy(),
    )?;
    Ok((tiny, train, vec![single]))
}

/// The tiny model's name in the figures.
const TINY_NAME: &str = "tiny-qwen3 f32";

/// Prompt tokens per row of the tiny model's decodes.
const TINY_PROMPT_LEN: usize = 16;

/// SmolLM2-135M's `config.json` (the sizes of HuggingFaceTB/SmolLM2-135M-Instruct): the
/// device benchmark trains a randomly initialised model of this shape.
pub const SMOLLM2_135M_CONFIG: &str = r#"{"model_type": "llama", "vocab_size": 49152,
  "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
  "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
  "rope_theta": 100000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
  "initializer_range": 0.041666666666666664, "bos_token_id": 1, "eos_token_id": 2}"#;

/// What `model_bench --device cuda` measures on a GPU (for `cargo xtask device-check`).
#[derive(Debug, Clone, Serialize)]
pub struct DeviceBench {
    /// The device, e.g. `cuda:0`.
    pub device: String,
    /// The tiny Qwen3.
    pub tiny_config: ModelShape,
    /// Its training.
    pub tiny_train: TrainFigures,
    /// Its decoding, one row and `decode_batch` rows.
    pub tiny_decode: Vec<DecodeFigures>,
    /// A randomly initialised model of SmolLM2-135M's shape.
    pub smollm2_config: ModelShape,
    /// Its training.
    pub smollm2_train: TrainFigures,
}

/// Training and decoding on `device` (a GPU): the tiny Qwen3 and a SmolLM2-135M-shaped model,
/// in f32 as the CPU benchmark.
pub fn run_on_device(options: &BenchOptions, device: &Device) -> Result<DeviceBench> {
    let (tiny, tiny_train, mut tiny_decode) = tiny_figures(options, device)?;
    tiny_decode.push(bench_decode(
        &tiny,
        TINY_NAME,
        options.decode_batch,
        TINY_PROMPT_LEN,
        options.n_decode_tokens,
        &Sampling::greedy(),
    )?);
    let smollm2_cfg = TransformerConfig::from_hf_json(SMOLLM2_135M_CONFIG, "SmolLM2-135M shape")?;
    let smollm2 = Policy::init(smollm2_cfg, 0, device, DType::F32)?;
    let smollm2_train = bench_train(
        &smollm2,
        options.train_batch,
        options.train_seq_len,
        options.n_train_steps,
    )?;
    Ok(DeviceBench {
        device: format!("{device:?}"),
        tiny_config: ModelShape::of(tiny.config()),
        tiny_train,
        tiny_decode,
        smollm2_config: ModelShape::of(smollm2.config()),
        smollm2_train,
    })
}

/// Runs every measurement on the CPU.
pub fn run(options: &BenchOptions) -> Result<ModelBench> {
    let device = Device::Cpu;
    let (tiny, tiny_train, mut tiny_decode) = tiny_figures(options, &device)?;
    // The batched decode against the prompt pass, in alternating rounds: the ratio's two sides.
    let (batched, tiny_prompt_pass) = bench_decode_against_prompt_pass(
        &tiny,
        TINY_NAME,
        options.decode_batch,
        TINY_PROMPT_LEN,
        options.n_decode_tokens,
        PROMPT_PASS_LEN,
    )?;
    tiny_decode.push(batched);
    let mut smollm2_decode = Vec::new();
    let mut prompt_ids = Vec::new();
    if options.smollm2 {
        let gguf = Gguf::open(&crate::model::smollm2_gguf()?)?;
        let prompt = smollm2_prompt();
        let mut quantized = gguf.load_quantized(&device)?;
        let name = format!("smollm2-135m q4_1 ({})", quantized.backend_name());
        smollm2_decode.push(bench_quantized_decode(
            &mut quantized,
            &name,
            &prompt,
            options.n_decode_tokens,
        )?);
        drop(quantized);
        let mut reference = gguf.load_quantized_candle(&device)?;
        let name = format!("smollm2-135m q4_1 reference ({})", reference.backend_name());
        smollm2_decode.push(bench_quantized_decode(
            &mut reference,
            &name,
            &prompt,
            options.n_decode_tokens,
        )?);
        drop(reference);
        let policy = gguf.load_policy(&device, DType::F32)?;
        smollm2_decode.push(bench_decode(
            &policy,
            "smollm2-135m f32 (dequantized policy)",
            1,
            prompt.len(),
            options.n_decode_tokens,
            &Sampling::greedy(),
        )?);
        prompt_ids = prompt;
    }
    Ok(ModelBench {
        n_threads: candle_core::utils::get_num_threads(),
        simd: crate::model::quant::simd_level().name(),
        gemm_avx512_compiled: cfg!(feature = "avx512"),
        tiny_config: ModelShape::of(tiny.config()),
        tiny_train,
        tiny_decode,
        tiny_prompt_pass,
        smollm2_decode,
        smollm2_prompt: prompt_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiply_adds_count_every_matrix_once_per_token() {
        let cfg = tiny_default_config().expect("the default tiny config");
        // Per token: q and o (256 × 256 each), k and v (256 × 128 each), the SwiGLU (3 × 256 ×
        // 768), in each of 4 layers; the head is 256 × 4096.
        let layers = 4.0 * (2.0 * 256.0 * 256.0 + 2.0 * 256.0 * 128.0 + 3.0 * 256.0 * 768.0);
        assert_eq!(layer_weight_multiply_adds(&cfg), layers);
        assert_eq!(head_multiply_adds(&cfg), 256.0 * 4096.0);
        // Two prompt tokens: contexts 1 and 2, 4 layers × 4 heads × 64 × 2 per key.
        let attention = 4.0 * 4.0 * 64.0 * 2.0 * (1.0 + 2.0);
        let one_row = 2.0 * layers + attention + 256.0 * 4096.0;
        assert_eq!(prompt_multiply_adds(&cfg, 3, 2), 3.0 * one_row);
        // One new token comes from the prompt pass; a second one costs a forward at context 3.
        assert_eq!(decode_multiply_adds(&cfg, 3, 2, 1), 3.0 * one_row);
        let step = layers + 4.0 * 4.0 * 64.0 * 2.0 * 3.0 + 256.0 * 4096.0;
        assert_eq!(decode_multiply_adds(&cfg, 3, 2, 2), 3.0 * (one_row + step));
    }
}
