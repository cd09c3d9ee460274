//! Policy model tests: parity with candle-transformers' Qwen3 and Llama on the same weights,
//! left-padded batched generation, finite-difference gradients of every parameter kind, an
//! AdamW step, and save → load round trips (single file and sharded).
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic here is the test failing, with the value.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use candle_core::{D, DType, Device, IndexOp, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder};
use candle_transformers::models::{llama as ref_llama, qwen3 as ref_qwen3};
use envace::Error;
use envace::config::{self, Architecture};
use envace::model::{self, KvCache, Policy, RopeScaling, Sampling, TransformerConfig};
use envace::rng::Rng;
use expect_test::expect;

/// `n` random token ids below `vocab`.
fn tokens(rng: &mut Rng, n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|_| rng.below(vocab) as u32).collect()
}

/// A tiny model. Qwen3 gets a `head_dim` wider than `hidden_size / n_heads`, as real Qwen3
/// checkpoints do; Llama may get Llama 3 RoPE scaling.
pub(crate) fn tiny(architecture: Architecture, tie: bool, rope_scaling: bool) -> TransformerConfig {
    TransformerConfig {
        architecture,
        vocab_size: 61,
        hidden_size: 32,
        intermediate_size: 48,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: if architecture == Architecture::Qwen3 {
            16
        } else {
            8
        },
        max_position_embeddings: 64,
        rope_theta: 10_000.0,
        rope_scaling: rope_scaling.then_some(RopeScaling {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 16,
        }),
        rms_norm_eps: 1e-6,
        tie_word_embeddings: tie,
        initializer_range: 0.2,
        bos_token_id: None,
        eos_token_ids: Vec::new(),
    }
}

/// A random model whose norm scales are not all one, so that a norm applied to the wrong
/// tensor shows.
pub(crate) fn random_policy(
    cfg: TransformerConfig,
    device: &Device,
    dtype: DType,
    seed: u64,
) -> Policy {
    let policy = Policy::init(cfg, seed, device, dtype).unwrap();
    let mut rng = Rng::new(seed.wrapping_mul(2654435761) | 1);
    for (name, var) in policy.vars() {
        if name.ends_with("norm.weight") {
            let values: Vec<f64> = (0..var.elem_count())
                .map(|_| 1.0 + 0.3 * (2.0 * rng.uniform() - 1.0))
                .collect();
            let t = Tensor::from_vec(values, var.shape(), device).unwrap();
            var.set(&t.to_dtype(dtype).unwrap()).unwrap();
        }
    }
    policy
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    let d = (a.to_dtype(DType::F64).unwrap() - b.to_dtype(DType::F64).unwrap()).unwrap();
    d.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

fn ids(rows: &[Vec<u32>], device: &Device) -> Tensor {
    let n = rows[0].len();
    let flat: Vec<u32> = rows.iter().flatten().copied().collect();
    Tensor::from_vec(flat, (rows.len(), n), device).unwrap()
}

/// The reference implementation of one architecture, loaded from a saved policy folder.
enum Reference {
    Qwen3 {
        cfg: ref_qwen3::Config,
        vb: VarBuilder<'static>,
        causal: ref_qwen3::ModelForCausalLM,
        head: Tensor,
    },
    Llama {
        model: ref_llama::Llama,
        cfg: ref_llama::Config,
    },
}

impl Reference {
    fn load(dir: &Path, device: &Device) -> Reference {
        let config_text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        let tensors =
            candle_core::safetensors::load(dir.join("model.safetensors"), device).unwrap();
        let head = tensors
            .get("lm_head.weight")
            .unwrap_or_else(|| &tensors["model.embed_tokens.weight"])
            .clone();
        let vb = VarBuilder::from_tensors(tensors, DType::F32, device);
        let json: serde_json::Value = serde_json::from_str(&config_text).unwrap();
        if json["model_type"] == "qwen3" {
            let cfg: ref_qwen3::Config = serde_json::from_str(&config_text).unwrap();
            Reference::Qwen3 {
                causal: ref_qwen3::ModelForCausalLM::new(&cfg, vb.clone()).unwrap(),
                cfg,
                vb,
                head,
            }
        } else {
            let cfg: ref_llama::LlamaConfig = serde_json::from_str(&config_text).unwrap();
            let cfg = cfg.into_config(false);
            Reference::Llama {
                model: ref_llama::Llama::load(vb, &cfg).unwrap(),
                cfg,
            }
        }
    }

    /// Logits `(b, l, vocab)` of every position, without padding.
    fn full_logits(&mut self, ids: &Tensor) -> Tensor {
        let device = ids.device().clone();
        match self {
            Reference::Qwen3 { cfg, vb, head, .. } => {
                // A fresh model: the reference keeps its KV cache inside and cannot clear it.
                let mut base = ref_qwen3::Model::new(cfg, vb.clone()).unwrap();
                let hidden = base.forward(ids, 0).unwrap();
                hidden.broadcast_matmul(&head.t().unwrap()).unwrap()
            }
            Reference::Llama { model, cfg } => {
                // The reference returns the last position only: run every prefix.
                let l = ids.dim(1).unwrap();
                let per_prefix: Vec<Tensor> = (1..=l)
                    .map(|p| {
                        let mut cache =
                            ref_llama::Cache::new(false, DType::F32, cfg, &device).unwrap();
                        model
                            .forward(&ids.narrow(1, 0, p).unwrap(), 0, &mut cache)
                            .unwrap()
                    })
                    .collect();
                Tensor::stack(&per_prefix, 1).unwrap()
            }
        }
    }

    /// Last-position logits `(b, vocab)` of a prompt followed by single-token steps, using
    /// the reference's own KV cache.
    fn cached_logits(&mut self, prompt: &Tensor, steps: &[Tensor]) -> Vec<Tensor> {
        let device = prompt.device().clone();
        let mut out = Vec::new();
        match self {
            Reference::Qwen3 { causal, .. } => {
                causal.clear_kv_cache();
                let mut offset = 0;
                for input in std::iter::once(prompt).chain(steps) {
                    out.push(causal.forward(input, offset).unwrap().squeeze(1).unwrap());
                    offset += input.dim(1).unwrap();
                }
            }
            Reference::Llama { model, cfg } => {
                let mut cache = ref_llama::Cache::new(true, DType::F32, cfg, &device).unwrap();
                let mut offset = 0;
                for input in std::iter::once(prompt).chain(steps) {
                    out.push(model.forward(input, offset, &mut cache).unwrap());
                    offset += input.dim(1).unwrap();
                }
            }
        }
        out
    }
}

/// The architectures and head layouts the parity tests cover.
fn parity_cases() -> Vec<(&'static str, TransformerConfig)> {
    vec![
        ("qwen3 tied", tiny(Architecture::Qwen3, true, false)),
        ("qwen3 untied", tiny(Architecture::Qwen3, false, false)),
        ("llama tied", tiny(Architecture::Llama, true, false)),
        (
            "llama untied, llama3 rope scaling",
            tiny(Architecture::Llama, false, true),
        ),
        (
            "qwen3 without grouped-query attention",
            TransformerConfig {
                n_kv_heads: 4,
                ..tiny(Architecture::Qwen3, true, false)
            },
        ),
    ]
}

/// Batch shapes `(rows, prompt length)` the parity tests run.
const PARITY_SHAPES: [(usize, usize); 4] = [(1, 1), (1, 9), (2, 6), (4, 13)];

fn parity_with_candle_transformers(device: &Device) {
    let mut report = String::new();
    for (case_idx, (name, cfg)) in parity_cases().into_iter().enumerate() {
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg, device, DType::F32, 100 + case_idx as u64);
        let dir = tempfile::tempdir().unwrap();
        policy.save(dir.path()).unwrap();
        let mut reference = Reference::load(dir.path(), device);
        let mut rng = Rng::new(7 + case_idx as u64);
        let (mut worst_train, mut worst_gen) = (0f64, 0f64);
        for (b, l) in PARITY_SHAPES {
            let prompt: Vec<Vec<u32>> = (0..b).map(|_| tokens(&mut rng, l, vocab)).collect();
            let prompt = ids(&prompt, device);
            let ours = policy.forward_train(&prompt, None).unwrap();
            let theirs = reference.full_logits(&prompt);
            let diff = max_abs_diff(&ours, &theirs);
            assert!(
                diff < 1e-4,
                "{name}, batch {b}x{l}: training forward differs by {diff}"
            );
            worst_train = worst_train.max(diff);

            let steps: Vec<Tensor> = (0..3)
                .map(|_| {
                    let step: Vec<Vec<u32>> = (0..b).map(|_| tokens(&mut rng, 1, vocab)).collect();
                    ids(&step, device)
                })
                .collect();
            let theirs = reference.cached_logits(&prompt, &steps);
            let mut cache = KvCache::new();
            for (idx, input) in std::iter::once(&prompt).chain(&steps).enumerate() {
                let ours = policy.forward_cached(input, None, &mut cache).unwrap();
                let diff = max_abs_diff(&ours, &theirs[idx]);
                assert!(
                    diff < 1e-4,
                    "{name}, batch {b}x{l}, step {idx}: generation differs by {diff}"
                );
                worst_gen = worst_gen.max(diff);
            }
        }
        report.push_str(&format!(
            "{name}: train {worst_train:.1e}, generate {worst_gen:.1e}\n"
        ));
    }
    eprintln!("max abs logit difference against candle-transformers:\n{report}");
}
test_device!(
    parity_with_candle_transformers,
    parity_with_candle_transformers_cpu,
    parity_with_candle_transformers_cuda
);

fn left_padded_batch_matches_rows_alone(device: &Device) {
    for arch in [Architecture::Qwen3, Architecture::Llama] {
        let cfg = tiny(arch, arch == Architecture::Llama, false);
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg, device, DType::F32, 3);
        let mut rng = Rng::new(11);
        let prompts: Vec<Vec<u32>> = [5, 1, 9, 3]
            .iter()
            .map(|&n| tokens(&mut rng, n, vocab))
            .collect();

        // Training forward: a left-padded row's real positions equal the row run alone.
        let (batch_ids, mask) = model::left_pad(&prompts, 0, device).unwrap();
        let batch_logits = policy.forward_train(&batch_ids, Some(&mask)).unwrap();
        let width = batch_ids.dim(1).unwrap();
        for (row, prompt) in prompts.iter().enumerate() {
            let alone = policy
                .forward_train(&ids(std::slice::from_ref(prompt), device), None)
                .unwrap();
            let padded = batch_logits
                .i((row..row + 1, width - prompt.len()..width, ..))
                .unwrap();
            let diff = max_abs_diff(&padded, &alone);
            assert!(
                diff < 1e-5,
                "{arch:?} row {row}: padded training logits differ by {diff}"
            );
        }

        // Greedy generation: the batch equals each row generated alone, token for token.
        let n_new = 12;
        let start = Instant::now();
        let batched = policy.generate_greedy(&prompts, n_new, &[]).unwrap();
        let secs = start.elapsed().as_secs_f64();
        for (row, prompt) in prompts.iter().enumerate() {
            let alone = policy
                .generate_greedy(std::slice::from_ref(prompt), n_new, &[])
                .unwrap();
            assert_eq!(batched[row], alone[0], "{arch:?} row {row}");
            assert_eq!(alone[0].len(), n_new);
        }
        let mut distinct = batched.clone();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() > 1,
            "{arch:?}: every row generated the same tokens: {batched:?}"
        );
        eprintln!(
            "{arch:?}: batch of {} generated {} tokens in {secs:.3} s ({:.0} tokens/s)",
            prompts.len(),
            prompts.len() * n_new,
            (prompts.len() * n_new) as f64 / secs
        );

        // A stop token ends its row and is kept.
        let stop = batched[0][2];
        let stopped = policy
            .generate_greedy(&prompts[..1], n_new, &[stop])
            .unwrap();
        let first_stop = batched[0].iter().position(|&t| t == stop).unwrap();
        assert_eq!(stopped[0], batched[0][..=first_stop]);
    }
}
test_device!(
    left_padded_batch_matches_rows_alone,
    left_padded_batch_matches_rows_alone_cpu,
    left_padded_batch_matches_rows_alone_cuda
);

fn rows_sharing_a_prompt_match_rows_with_their_own(device: &Device) {
    for arch in [Architecture::Qwen3, Architecture::Llama] {
        let cfg = tiny(arch, false, false);
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg, device, DType::F32, 5);
        let mut rng = Rng::new(31);
        let [a, b, c] = [6, 3, 8].map(|n| tokens(&mut rng, n, vocab));
        // As a GRPO step asks: several rows per prompt, the groups interleaved.
        let shared = vec![a.clone(), b.clone(), a.clone(), c, a, b];
        let n_new = 10;
        let hot = Sampling {
            temperature: 1.5,
            top_p: 1.0,
            top_k: 0,
            seed: 3,
        };
        let greedy = policy.generate_greedy(&shared, n_new, &[]).unwrap();
        let sampled = policy.generate(&shared, n_new, &[], &hot).unwrap();
        for (row, prompt) in shared.iter().enumerate() {
            // Row `row` of a batch in which no prompt repeats, with the same random stream.
            let mut own: Vec<Vec<u32>> = (0..row)
                .map(|other| tokens(&mut rng, 2 + other, vocab))
                .collect();
            own.push(prompt.clone());
            let alone = policy.generate_greedy(&own, n_new, &[]).unwrap();
            assert_eq!(greedy[row], alone[row], "{arch:?} row {row}, greedy");
            let alone = policy.generate(&own, n_new, &[], &hot).unwrap();
            assert_eq!(
                sampled[row].tokens, alone[row].tokens,
                "{arch:?} row {row}, sampled"
            );
            for (got, want) in sampled[row].logprobs.iter().zip(&alone[row].logprobs) {
                assert!(
                    (got - want).abs() < 1e-4,
                    "{arch:?} row {row}: log-probability {got} against {want}"
                );
            }
        }
        // The rows of one prompt drew from their own streams, not one shared sample.
        assert_ne!(
            sampled[0].tokens, sampled[2].tokens,
            "{arch:?}: two rows of one prompt sampled the same tokens"
        );
        assert_ne!(
            greedy[0], greedy[1],
            "{arch:?}: two prompts gave the same tokens"
        );
    }
}
test_device!(
    rows_sharing_a_prompt_match_rows_with_their_own,
    rows_sharing_a_prompt_match_rows_with_their_own_cpu,
    rows_sharing_a_prompt_match_rows_with_their_own_cuda
);

fn sampling_reports_the_policy_logprobs(device: &Device) {
    for arch in [Architecture::Qwen3, Architecture::Llama] {
        let cfg = tiny(arch, false, false);
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg, device, DType::F32, 9);
        let mut rng = Rng::new(21);
        let prompts: Vec<Vec<u32>> = [4, 9, 1]
            .iter()
            .map(|&n| tokens(&mut rng, n, vocab))
            .collect();
        let n_new = 10;
        let sampling = |temperature: f64, top_p: f64, top_k: usize, seed: u64| Sampling {
            temperature,
            top_p,
            top_k,
            seed,
        };

        // Temperature 0, top-k 1 and a vanishing nucleus are greedy.
        let greedy = policy.generate_greedy(&prompts, n_new, &[]).unwrap();
        for choice in [
            sampling(0.0, 1.0, 0, 5),
            sampling(1.0, 1.0, 1, 5),
            sampling(1.0, 1e-9, 0, 5),
        ] {
            let got = policy.generate(&prompts, n_new, &[], &choice).unwrap();
            let tokens: Vec<Vec<u32>> = got.into_iter().map(|g| g.tokens).collect();
            assert_eq!(tokens, greedy, "{arch:?} {choice:?}");
        }

        // Sampling is reproducible per seed and differs between seeds.
        let hot = sampling(1.5, 0.95, 0, 1);
        let first = policy.generate(&prompts, n_new, &[], &hot).unwrap();
        assert_eq!(first, policy.generate(&prompts, n_new, &[], &hot).unwrap());
        let other = policy
            .generate(&prompts, n_new, &[], &sampling(1.5, 0.95, 0, 2))
            .unwrap();
        assert_ne!(first, other, "{arch:?}: two seeds gave the same samples");
        assert_ne!(
            first.iter().map(|g| g.tokens.clone()).collect::<Vec<_>>(),
            greedy,
            "{arch:?}: sampling at temperature 1.5 was greedy"
        );

        // The reported log-probabilities are the training forward's, token by token.
        for (prompt, generated) in prompts.iter().zip(&first) {
            let whole: Vec<u32> = prompt.iter().chain(&generated.tokens).copied().collect();
            let logits = policy
                .forward_train(&ids(std::slice::from_ref(&whole), device), None)
                .unwrap();
            let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)
                .unwrap()
                .squeeze(0)
                .unwrap();
            let logp = logp.to_vec2::<f32>().unwrap();
            for (idx, (&token, &reported)) in
                generated.tokens.iter().zip(&generated.logprobs).enumerate()
            {
                let expected = logp[prompt.len() - 1 + idx][token as usize];
                assert!(
                    (expected - reported).abs() < 1e-4,
                    "{arch:?} token {idx}: generation reports {reported}, training computes {expected}"
                );
            }
        }
    }
}
test_device!(
    sampling_reports_the_policy_logprobs,
    sampling_reports_the_policy_logprobs_cpu,
    sampling_reports_the_policy_logprobs_cuda
);

fn forked_cache_continues_independently(device: &Device) {
    let cfg = tiny(Architecture::Qwen3, true, false);
    let vocab = cfg.vocab_size;
    let policy = random_policy(cfg, device, DType::F32, 6);
    let mut rng = Rng::new(13);
    // 60 + 2 steps stays inside the first buffer; 70 + 2 steps makes it grow on the way.
    for prefix_len in [60, 70] {
        let prefix = ids(
            &[
                tokens(&mut rng, prefix_len, vocab),
                tokens(&mut rng, prefix_len, vocab),
            ],
            device,
        );
        let branches = [
            [vec![1], vec![2], vec![5], vec![6]],
            [vec![3], vec![4], vec![7], vec![8]],
        ]
        .map(|rows| (ids(&rows[..2], device), ids(&rows[2..], device)));
        let mut cache = KvCache::new();
        policy.forward_cached(&prefix, None, &mut cache).unwrap();
        let mut caches = [cache.fork().unwrap(), cache];
        // Interleave the branches so that shared buffers would overwrite each other.
        let mut got = Vec::new();
        for (branch, (first, _)) in caches.iter_mut().zip(&branches) {
            policy.forward_cached(first, None, branch).unwrap();
        }
        for (branch, (_, second)) in caches.iter_mut().zip(&branches) {
            got.push(policy.forward_cached(second, None, branch).unwrap());
            assert_eq!(branch.len(), prefix_len + 2);
        }
        for (got, (first, second)) in got.iter().zip(&branches) {
            let whole = Tensor::cat(&[&prefix, first, second], 1).unwrap();
            let expected = policy
                .forward_train(&whole, None)
                .unwrap()
                .i((.., prefix_len + 1, ..))
                .unwrap();
            let diff = max_abs_diff(got, &expected);
            assert!(
                diff < 1e-5,
                "prefix {prefix_len}: a branch differs from the whole sequence by {diff}"
            );
        }
    }
}
test_device!(
    forked_cache_continues_independently,
    forked_cache_continues_independently_cpu,
    forked_cache_continues_independently_cuda
);

/// A fixed SFT-style batch: one right-padded and one left-padded row.
fn sft_batch(vocab: usize, device: &Device) -> (Tensor, Tensor, Tensor) {
    let mut rng = Rng::new(5);
    let a = tokens(&mut rng, 7, vocab);
    let c = tokens(&mut rng, 5, vocab);
    let pad = 0u32;
    let input = vec![a[..6].to_vec(), vec![pad, pad, c[0], c[1], c[2], c[3]]];
    let labels = vec![a[1..7].to_vec(), vec![pad, pad, c[1], c[2], c[3], c[4]]];
    let mask = vec![vec![1u8, 1, 1, 1, 1, 0], vec![0u8, 0, 1, 1, 1, 1]];
    let flat_mask: Vec<u8> = mask.into_iter().flatten().collect();
    (
        ids(&input, device),
        ids(&labels, device),
        Tensor::from_vec(flat_mask, (2, 6), device).unwrap(),
    )
}

/// Mean cross-entropy of the labels over the masked-in positions.
fn sft_loss(policy: &Policy, input: &Tensor, labels: &Tensor, mask: &Tensor) -> Tensor {
    let logits = policy.forward_train(input, Some(mask)).unwrap();
    let logp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
    let picked = logp
        .gather(&labels.unsqueeze(2).unwrap(), 2)
        .unwrap()
        .squeeze(2)
        .unwrap();
    let weights = mask.to_dtype(picked.dtype()).unwrap();
    let n = weights.sum_all().unwrap();
    (picked * weights)
        .unwrap()
        .sum_all()
        .unwrap()
        .neg()
        .unwrap()
        .broadcast_div(&n)
        .unwrap()
}

fn scalar(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap()
}

fn finite_difference_gradients(device: &Device) {
    let eps = 1e-5;
    for arch in [Architecture::Qwen3, Architecture::Llama] {
        let cfg = tiny(arch, false, arch == Architecture::Llama);
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg, device, DType::F64, 21);
        let (input, labels, mask) = sft_batch(vocab, device);
        let loss = sft_loss(&policy, &input, &labels, &mask);
        let grads = loss.backward().unwrap();
        let used_token = input.i((0, 2)).unwrap().to_scalar::<u32>().unwrap() as usize;
        let mut kinds = vec![
            "model.embed_tokens.weight",
            "model.layers.1.input_layernorm.weight",
            "model.layers.1.self_attn.q_proj.weight",
            "model.layers.1.self_attn.k_proj.weight",
            "model.layers.0.self_attn.v_proj.weight",
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.post_attention_layernorm.weight",
            "model.layers.0.mlp.gate_proj.weight",
            "model.layers.1.mlp.up_proj.weight",
            "model.layers.1.mlp.down_proj.weight",
            "model.norm.weight",
            "lm_head.weight",
        ];
        if arch == Architecture::Qwen3 {
            kinds.extend([
                "model.layers.0.self_attn.q_norm.weight",
                "model.layers.1.self_attn.k_norm.weight",
            ]);
        }
        let mut rng = Rng::new(99);
        for name in kinds {
            let var = &policy.vars()[name];
            let grad = grads
                .get(var.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f64>()
                .unwrap();
            let base = var.flatten_all().unwrap().to_vec1::<f64>().unwrap();
            let row_len = var.dims().last().copied().unwrap();
            let mut largest = 0f64;
            for _ in 0..4 {
                let idx = if name == "model.embed_tokens.weight" {
                    used_token * row_len + (rng.next_u64() as usize % row_len)
                } else {
                    rng.next_u64() as usize % base.len()
                };
                let loss_at = |delta: f64| {
                    let mut values = base.clone();
                    values[idx] += delta;
                    var.set(&Tensor::from_vec(values, var.shape(), device).unwrap())
                        .unwrap();
                    scalar(&sft_loss(&policy, &input, &labels, &mask))
                };
                let numeric = (loss_at(eps) - loss_at(-eps)) / (2.0 * eps);
                var.set(&Tensor::from_vec(base.clone(), var.shape(), device).unwrap())
                    .unwrap();
                let analytic = grad[idx];
                assert!(
                    (numeric - analytic).abs() <= 1e-7 + 1e-5 * analytic.abs(),
                    "{arch:?} {name}[{idx}]: finite difference {numeric}, backward {analytic}"
                );
                largest = largest.max(analytic.abs());
            }
            assert!(
                largest > 1e-6,
                "{arch:?} {name}: every checked gradient is ~0 ({largest})"
            );
        }
    }
}
test_device!(
    finite_difference_gradients,
    finite_difference_gradients_cpu,
    finite_difference_gradients_cuda
);

fn every_parameter_gets_a_gradient(device: &Device) {
    for arch in [Architecture::Qwen3, Architecture::Llama] {
        for tie in [true, false] {
            let cfg = tiny(arch, tie, false);
            let vocab = cfg.vocab_size;
            let policy = random_policy(cfg, device, DType::F32, 8);
            let (input, labels, mask) = sft_batch(vocab, device);
            let grads = sft_loss(&policy, &input, &labels, &mask)
                .backward()
                .unwrap();
            let missing = policy.params_without_gradient(&grads).unwrap();
            assert!(
                missing.is_empty(),
                "{arch:?} tied={tie}: no gradient for {missing:?}"
            );

            // The check itself fails on a path that drops gradients: the generation path runs
            // on detached weights, so a loss built from it trains nothing.
            let mut cache = KvCache::new();
            let logits = policy
                .forward_cached(&input, Some(&mask), &mut cache)
                .unwrap();
            let detached_loss = candle_nn::loss::cross_entropy(
                &logits,
                &labels.i((.., 5)).unwrap().contiguous().unwrap(),
            )
            .unwrap();
            let grads = detached_loss.backward().unwrap();
            let missing = policy.params_without_gradient(&grads).unwrap();
            assert_eq!(missing.len(), policy.vars().len(), "{arch:?} tied={tie}");
        }
    }
}
test_device!(
    every_parameter_gets_a_gradient,
    every_parameter_gets_a_gradient_cpu,
    every_parameter_gets_a_gradient_cuda
);

/// A weighted sum of the target log-probabilities and entropies of `train_token_stats` at
/// `rows`, whose targets are those rows' labels.
fn stats_loss(
    policy: &Policy,
    input: &Tensor,
    mask: &Tensor,
    rows: &Tensor,
    labels: &Tensor,
) -> Tensor {
    let targets = labels.flatten_all().unwrap().index_select(rows, 0).unwrap();
    let (logp, entropy) = policy
        .train_token_stats(input, Some(mask), Some(rows), &targets, true)
        .unwrap();
    let n = rows.dim(0).unwrap();
    let weights: Vec<f64> = (0..n).map(|i| 0.5 - i as f64 * 0.3).collect();
    let weights = Tensor::new(weights.as_slice(), input.device())
        .unwrap()
        .to_dtype(logp.dtype())
        .unwrap();
    let logp_part = (logp * &weights).unwrap().sum_all().unwrap();
    let entropy_part = (entropy.to_dtype(logp_part.dtype()).unwrap() * 0.7)
        .unwrap()
        .sum_all()
        .unwrap();
    (logp_part + entropy_part).unwrap()
}

/// On the CPU in f32 the layers train as one graph node whose backward is chained by hand
/// (`model/stack.rs`), and the head with the token statistics as another; every parameter's
/// gradient matches the composed ops' in f64, for both architectures, tied and untied, through
/// a padded batch, through the trained-rows head and through the token statistics.
#[test]
fn the_cpu_training_layers_give_the_composed_gradients() {
    let device = Device::Cpu;
    for arch in [Architecture::Qwen3, Architecture::Llama] {
        for tie in [true, false] {
            let cfg = tiny(arch, tie, false);
            let vocab = cfg.vocab_size;
            let policy = random_policy(cfg, &device, DType::F32, 12);
            let dir = tempfile::tempdir().unwrap();
            policy.save(dir.path()).unwrap();
            let wide = Policy::load(dir.path(), &device, DType::F64).unwrap();
            let (input, labels, mask) = sft_batch(vocab, &device);
            // A loss over every position, and one over a few rows with unequal weights.
            let rows = Tensor::new(&[1u32, 4, 8, 9, 11], &device).unwrap();
            let row_weights = Tensor::new(&[0.5f64, -1.0, 2.0, 1.5, 0.25], &device).unwrap();
            let rows_loss = |p: &Policy| {
                let logits = p.forward_train_rows(&input, Some(&mask), &rows).unwrap();
                let logp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
                let weights = row_weights.to_dtype(logp.dtype()).unwrap();
                logp.i((.., 3))
                    .unwrap()
                    .mul(&weights)
                    .unwrap()
                    .sum_all()
                    .unwrap()
            };
            let cases = [
                (
                    "all positions",
                    sft_loss(&policy, &input, &labels, &mask),
                    sft_loss(&wide, &input, &labels, &mask),
                ),
                ("trained rows", rows_loss(&policy), rows_loss(&wide)),
                (
                    "token statistics",
                    stats_loss(&policy, &input, &mask, &rows, &labels),
                    stats_loss(&wide, &input, &mask, &rows, &labels),
                ),
            ];
            for (case, narrow_loss, wide_loss) in cases {
                let (narrow, wide_grads) = (
                    narrow_loss.backward().unwrap(),
                    wide_loss.backward().unwrap(),
                );
                for (name, var) in policy.vars() {
                    let got = narrow.get(var.as_tensor()).unwrap();
                    let want = wide_grads.get(wide.vars()[name].as_tensor()).unwrap();
                    let scale = scalar(&want.abs().unwrap().flatten_all().unwrap().max(0).unwrap());
                    let diff = max_abs_diff(got, want);
                    assert!(
                        scale > 0.0 && diff <= 1e-4 * scale,
                        "{arch:?} tied={tie} {case}: {name}'s gradient is off by {diff} \
                         (largest {scale})"
                    );
                }
            }
        }
    }
}

fn adamw_step_lowers_the_loss(device: &Device) {
    for arch in [Architecture::Qwen3, Architecture::Llama] {
        let cfg = tiny(arch, true, false);
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg, device, DType::F32, 4);
        let (input, labels, mask) = sft_batch(vocab, device);
        let params = ParamsAdamW {
            lr: 3e-3,
            weight_decay: 0.0,
            ..Default::default()
        };
        let frozen = policy.deep_copy().unwrap();
        let mut opt = AdamW::new(policy.trainable_vars(), params).unwrap();
        let mut losses = Vec::new();
        for _ in 0..10 {
            let loss = sft_loss(&policy, &input, &labels, &mask);
            losses.push(scalar(&loss));
            opt.backward_step(&loss).unwrap();
        }
        losses.push(scalar(&sft_loss(&policy, &input, &labels, &mask)));
        assert!(
            losses[1] < losses[0],
            "{arch:?}: one step did not lower the loss: {losses:?}"
        );
        assert!(
            losses.windows(2).all(|w| w[1] < w[0]),
            "{arch:?}: {losses:?}"
        );
        assert!(losses[10] < 0.8 * losses[0], "{arch:?}: {losses:?}");

        // The deep copy (a frozen reference policy) did not move.
        assert_eq!(
            scalar(&sft_loss(&frozen, &input, &labels, &mask)),
            losses[0]
        );
        // The generation path reads the updated weights.
        let mut cache = KvCache::new();
        let generated = policy
            .forward_cached(&input, Some(&mask), &mut cache)
            .unwrap();
        let trained = policy
            .forward_train(&input, Some(&mask))
            .unwrap()
            .i((.., 5, ..))
            .unwrap();
        let diff = max_abs_diff(&generated, &trained);
        assert!(
            diff < 1e-5,
            "{arch:?}: generation and training paths differ by {diff} after training"
        );
    }
}
test_device!(
    adamw_step_lowers_the_loss,
    adamw_step_lowers_the_loss_cpu,
    adamw_step_lowers_the_loss_cuda
);

fn save_load_round_trip(device: &Device) {
    for (name, cfg) in parity_cases() {
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg.clone(), device, DType::F32, 31);
        let dir = tempfile::tempdir().unwrap();
        policy.save(dir.path()).unwrap();
        let loaded = Policy::load(dir.path(), device, DType::F32).unwrap();
        assert_eq!(loaded.config(), &cfg, "{name}");
        let input = ids(
            &[
                tokens(&mut Rng::new(1), 10, vocab),
                tokens(&mut Rng::new(2), 10, vocab),
            ],
            device,
        );
        let a = policy.forward_train(&input, None).unwrap();
        let b = loaded.forward_train(&input, None).unwrap();
        assert_eq!(max_abs_diff(&a, &b), 0.0, "{name}");

        // The same weights split over two shards with an index, as large checkpoints come.
        let sharded = tempfile::tempdir().unwrap();
        std::fs::copy(
            dir.path().join("config.json"),
            sharded.path().join("config.json"),
        )
        .unwrap();
        let mut shards: [HashMap<String, Tensor>; 2] = Default::default();
        let mut weight_map = serde_json::Map::new();
        for (idx, (tensor_name, var)) in policy.vars().iter().enumerate() {
            let file = format!("model-0000{}-of-00002.safetensors", idx % 2 + 1);
            shards[idx % 2].insert(tensor_name.clone(), var.as_detached_tensor());
            weight_map.insert(tensor_name.clone(), file.into());
        }
        for (idx, shard) in shards.iter().enumerate() {
            let path = sharded
                .path()
                .join(format!("model-0000{}-of-00002.safetensors", idx + 1));
            candle_core::safetensors::save(shard, path).unwrap();
        }
        let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
        std::fs::write(
            sharded.path().join("model.safetensors.index.json"),
            index.to_string(),
        )
        .unwrap();
        let from_shards = Policy::load(sharded.path(), device, DType::F32).unwrap();
        let c = from_shards.forward_train(&input, None).unwrap();
        assert_eq!(max_abs_diff(&a, &c), 0.0, "{name}, sharded");

        let mut cache_a = KvCache::new();
        let mut cache_b = KvCache::new();
        let ga = policy.forward_cached(&input, None, &mut cache_a).unwrap();
        let gb = loaded.forward_cached(&input, None, &mut cache_b).unwrap();
        assert_eq!(max_abs_diff(&ga, &gb), 0.0, "{name}, generation");
    }
}
test_device!(
    save_load_round_trip,
    save_load_round_trip_cpu,
    save_load_round_trip_cuda
);

fn half_precision_runs_and_trains(device: &Device) {
    for (name, cfg) in parity_cases() {
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg, device, DType::F32, 17);
        let dir = tempfile::tempdir().unwrap();
        policy.save(dir.path()).unwrap();
        let input = ids(
            &[
                tokens(&mut Rng::new(3), 8, vocab),
                tokens(&mut Rng::new(4), 8, vocab),
            ],
            device,
        );
        let full = policy.forward_train(&input, None).unwrap();
        let scale = full.abs().unwrap().flatten_all().unwrap().max(0).unwrap();
        let scale = scalar(&scale);
        for dtype in [DType::BF16, DType::F16] {
            let half = Policy::load(dir.path(), device, dtype).unwrap();
            let logits = half.forward_train(&input, None).unwrap();
            assert_eq!(logits.dtype(), dtype);
            let diff = max_abs_diff(&logits, &full);
            eprintln!(
                "{name} {dtype:?}: training logits within {diff:.3} of f32 (largest {scale:.2})"
            );
            assert!(
                diff < 0.05 * scale,
                "{name} {dtype:?}: training logits off by {diff} (scale {scale})"
            );
            let mut cache = KvCache::new();
            let last = half.forward_cached(&input, None, &mut cache).unwrap();
            let diff = max_abs_diff(&last, &full.i((.., 7, ..)).unwrap());
            assert!(
                diff < 0.05 * scale,
                "{name} {dtype:?}: generation logits off by {diff} (scale {scale})"
            );
            let (input, labels, mask) = sft_batch(vocab, device);
            let grads = sft_loss(&half, &input, &labels, &mask).backward().unwrap();
            let missing = half.params_without_gradient(&grads).unwrap();
            assert!(
                missing.is_empty(),
                "{name} {dtype:?}: no gradient for {missing:?}"
            );
        }
    }
}
test_device!(
    half_precision_runs_and_trains,
    half_precision_runs_and_trains_cpu,
    half_precision_runs_and_trains_cuda
);

/// Errors name the file and the tensor or field at fault.
#[test]
fn load_errors_name_what_is_wrong() {
    let device = Device::Cpu;
    let policy = random_policy(
        tiny(Architecture::Qwen3, true, false),
        &device,
        DType::F32,
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    policy.save(dir.path()).unwrap();
    let dir_name = dir.path().display().to_string();
    let check = |err: Error, expect: expect_test::Expect| {
        expect.assert_eq(&err.to_string().replace(&dir_name, "DIR"));
    };

    // A config whose sizes no longer match the weights.
    let config_path = dir.path().join("config.json");
    let text = std::fs::read_to_string(&config_path).unwrap();
    std::fs::write(
        &config_path,
        text.replace("\"intermediate_size\": 48", "\"intermediate_size\": 40"),
    )
    .unwrap();
    check(
        Policy::load(dir.path(), &device, DType::F32).unwrap_err(),
        expect![
            "DIR: tensor model.layers.0.mlp.gate_proj.weight has shape [48, 32]; the config needs [40, 32]"
        ],
    );

    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    check(
        Policy::load(dir.path(), &device, DType::F32).unwrap_err(),
        expect![
            "DIR: neither model.safetensors nor model.safetensors.index.json is in this folder"
        ],
    );
}

/// Hugging Face `config.json` files of real checkpoints parse into the expected config, and
/// unsupported ones are refused with the field named.
#[test]
fn hf_configs() {
    let check = |text: &str, expect: expect_test::Expect| {
        let got = match TransformerConfig::from_hf_json(text, "config.json") {
            Ok(cfg) => format!("{cfg:#?}"),
            Err(err) => format!("error: {err}"),
        };
        expect.assert_eq(&got);
    };
    // Qwen3-0.6B.
    check(
        r#"{"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
            "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
            "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
            "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
            "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
            "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
            "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}"#,
        expect![[r#"
            TransformerConfig {
                architecture: Qwen3,
                vocab_size: 151936,
                hidden_size: 1024,
                intermediate_size: 3072,
                n_layers: 28,
                n_heads: 16,
                n_kv_heads: 8,
                head_dim: 128,
                max_position_embeddings: 40960,
                rope_theta: 1000000.0,
                rope_scaling: None,
                rms_norm_eps: 1e-6,
                tie_word_embeddings: true,
                initializer_range: 0.02,
                bos_token_id: Some(
                    151643,
                ),
                eos_token_ids: [
                    151645,
                ],
            }"#]],
    );
    // SmolLM2-135M-Instruct.
    check(
        r#"{"architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
            "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 576,
            "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
            "max_position_embeddings": 8192, "mlp_bias": false, "model_type": "llama",
            "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
            "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
            "rope_theta": 100000, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
            "use_cache": true, "vocab_size": 49152}"#,
        expect![[r#"
            TransformerConfig {
                architecture: Llama,
                vocab_size: 49152,
                hidden_size: 576,
                intermediate_size: 1536,
                n_layers: 30,
                n_heads: 9,
                n_kv_heads: 3,
                head_dim: 64,
                max_position_embeddings: 8192,
                rope_theta: 100000.0,
                rope_scaling: None,
                rms_norm_eps: 1e-5,
                tie_word_embeddings: true,
                initializer_range: 0.041666666666666664,
                bos_token_id: Some(
                    1,
                ),
                eos_token_ids: [
                    2,
                ],
            }"#]],
    );
    check(
        r#"{"model_type": "mistral", "hidden_size": 8}"#,
        expect![[
            r#"error: config.json, field model_type: "mistral" is not supported; the supported model types are "qwen3" and "llama""#
        ]],
    );
    check(
        r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "vocab_size": 100,
            "num_hidden_layers": 2, "num_attention_heads": 4,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}"#,
        expect![[
            r#"error: config.json, field rope_scaling: rope_type "yarn" is not implemented; use "llama3" or none"#
        ]],
    );
    check(
        r#"{"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "vocab_size": 100,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3}"#,
        expect!["error: config.json: num_key_value_heads (3) must divide num_attention_heads (4)"],
    );
    check(
        r#"{"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "vocab_size": "many",
            "num_hidden_layers": 2, "num_attention_heads": 4}"#,
        expect![[
            r#"error: config.json, field vocab_size: expected a non-negative integer, found "many""#
        ]],
    );
}

/// A `[model.tiny]` section becomes a model of the sizes it names.
#[test]
fn tiny_config_builds_a_model() {
    let tiny = config::TinyModelConfig {
        architecture: Architecture::Llama,
        hidden_size: 64,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        intermediate_size: 96,
        vocab_size: 300,
        max_position_embeddings: 128,
        rope_theta: 10_000.0,
        tie_embeddings: false,
        split_digits: true,
    };
    let cfg = TransformerConfig::from_tiny(&tiny).unwrap();
    assert_eq!(cfg.head_dim, 16);
    fn shareable_across_threads<T: Send + Sync>() {}
    shareable_across_threads::<Policy>();
    let policy = Policy::init(cfg, 0, &Device::Cpu, DType::F32).unwrap();
    // Embedding and head 2 x 300 x 64, per layer 4 x 64 x 64 attention (k, v at half width)
    // + 3 x 64 x 96 MLP + 2 x 64 norms, and the final norm.
    let per_layer = 64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 96 + 2 * 64;
    assert_eq!(policy.n_params(), 2 * 300 * 64 + 2 * per_layer + 64);
    let again = Policy::init(policy.config().clone(), 0, &Device::Cpu, DType::F32).unwrap();
    let other_seed = Policy::init(policy.config().clone(), 1, &Device::Cpu, DType::F32).unwrap();
    let input = ids(&[vec![1, 2, 3]], &Device::Cpu);
    let logits = policy.forward_train(&input, None).unwrap();
    assert_eq!(
        max_abs_diff(&logits, &again.forward_train(&input, None).unwrap()),
        0.0
    );
    assert!(max_abs_diff(&logits, &other_seed.forward_train(&input, None).unwrap()) > 1e-3);
}

#[test]
fn device_resolution() {
    assert!(
        model::resolve_device(config::Device::Cpu, 0)
            .unwrap()
            .is_cpu()
    );
    assert!(
        model::resolve_device(config::Device::Wgpu, 0)
            .unwrap()
            .is_cpu()
    );
    assert_eq!(model::candle_dtype(config::Dtype::Bf16), DType::BF16);
    #[cfg(not(feature = "cuda"))]
    {
        assert!(
            model::resolve_device(config::Device::Auto, 0)
                .unwrap()
                .is_cpu()
        );
        let err = model::resolve_device(config::Device::Cuda, 0).unwrap_err();
        expect![[r#"the cuda backend is not compiled into this build; rebuild with `--features cuda` or choose `device = "cpu"`"#]]
            .assert_eq(&err.to_string());
    }
    #[cfg(feature = "cuda")]
    assert!(
        model::resolve_device(config::Device::Auto, 0)
            .unwrap()
            .is_cuda()
    );
}

#[test]
fn throughput_measurements_report_their_figures() {
    use envace::bench;
    let policy = random_policy(
        tiny(Architecture::Qwen3, true, false),
        &Device::Cpu,
        DType::F32,
        3,
    );
    let train = bench::bench_train(&policy, 2, 8, 2).unwrap();
    assert_eq!((train.n_steps, train.batch, train.seq_len), (2, 2, 8));
    assert!(train.tokens_per_sec > 0.0 && train.final_loss.is_finite());
    let decode = bench::bench_decode(&policy, "tiny", 3, 4, 5, &Sampling::greedy()).unwrap();
    assert_eq!((decode.batch, decode.n_tokens), (3, 15));
    assert!(decode.tokens_per_sec > 0.0);
    let json = serde_json::to_value(&decode).unwrap();
    assert_eq!(json["model"], "tiny");
    let default = bench::tiny_default_config().unwrap();
    assert_eq!(
        (
            default.architecture,
            default.hidden_size,
            default.n_layers,
            default.vocab_size
        ),
        (Architecture::Qwen3, 256, 4, 4096)
    );
}
