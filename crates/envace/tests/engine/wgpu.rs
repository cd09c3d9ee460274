//! The wgpu path against the CPU path on the same weights, on whatever adapter wgpu finds
//! (lavapipe here): logits of left-padded batches within 1e-3 for tiny models, the quickstart's
//! default model and SmolLM2 (f32 and Q4_1), greedy generations that agree for 32 tokens,
//! seeded sampling that reproduces itself, and sampled tokens' log-probabilities equal to the
//! training forward's.

use std::sync::{Arc, OnceLock};

use candle_core::{DType, Device, IndexOp, Tensor};
use envace::config::{Architecture, TinyModelConfig};
use envace::model::wgpu::{self as gpu_path, Gpu, GpuModel, open_gpu};
use envace::model::{self, Gguf, KvCache, Policy, Sampling, TransformerConfig};
use envace::rng::Rng;

use crate::gguf::{require, smollm2_prompt};
use crate::model::{random_policy, tiny};

fn gpu() -> Arc<Gpu> {
    static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
    Arc::clone(GPU.get_or_init(|| open_gpu(None).unwrap_or_else(|e| panic!("{e}"))))
}

fn to_vec(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Random prompts of 1..=max_len tokens.
fn prompts(rng: &mut Rng, b: usize, max_len: usize, vocab: usize) -> Vec<Vec<u32>> {
    (0..b)
        .map(|_| {
            let len = 1 + rng.below(max_len);
            (0..len).map(|_| rng.below(vocab) as u32).collect()
        })
        .collect()
}

/// The CPU path's last-position logits of the left-padded prompts, then those after one more
/// token per row.
fn cpu_logits(policy: &Policy, prompts: &[Vec<u32>], next: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let (ids, mask) = model::left_pad(prompts, 0, &Device::Cpu).unwrap();
    let mut cache = KvCache::new();
    let first = policy
        .forward_cached(&ids, Some(&mask), &mut cache)
        .unwrap();
    let next = Tensor::from_vec(next.to_vec(), (next.len(), 1), &Device::Cpu).unwrap();
    let second = policy.forward_cached(&next, None, &mut cache).unwrap();
    (to_vec(&first), to_vec(&second))
}

/// The same on the GPU.
fn gpu_logits(model: &GpuModel, prompts: &[Vec<u32>], next: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let mut session = model.start(prompts, 2).unwrap();
    let first = model.logits(&session).unwrap();
    model.step(&mut session, next).unwrap();
    (first, model.logits(&session).unwrap())
}

fn assert_logits_match(what: &str, policy: &Policy, model: &GpuModel, prompts: &[Vec<u32>]) {
    let next: Vec<u32> = (0..prompts.len() as u32)
        .map(|r| (7 * r + 1) % policy.config().vocab_size as u32)
        .collect();
    let (cpu_first, cpu_second) = cpu_logits(policy, prompts, &next);
    let (gpu_first, gpu_second) = gpu_logits(model, prompts, &next);
    let (d1, d2) = (
        max_abs(&cpu_first, &gpu_first),
        max_abs(&cpu_second, &gpu_second),
    );
    assert!(
        d1 <= 1e-3 && d2 <= 1e-3,
        "{what}, batch {}: logits differ by {d1} after the prompt pass and {d2} after a decode step",
        prompts.len()
    );
}

#[test]
fn tiny_models_on_the_gpu_give_the_cpu_paths_logits() {
    let mut rng = Rng::new(17);
    let configs: [(&str, TransformerConfig); 3] = [
        ("tiny Qwen3, tied", tiny(Architecture::Qwen3, true, false)),
        (
            "tiny Llama, untied, RoPE scaling",
            tiny(Architecture::Llama, false, true),
        ),
        (
            "the quickstart's default model",
            TransformerConfig::from_tiny(&TinyModelConfig::default()).unwrap(),
        ),
    ];
    for (what, cfg) in configs {
        let vocab = cfg.vocab_size;
        let policy = random_policy(cfg, &Device::Cpu, DType::F32, 3);
        let model = policy.to_gpu(gpu(), 64).unwrap();
        for b in [1, 3, 16] {
            assert_logits_match(what, &policy, &model, &prompts(&mut rng, b, 12, vocab));
        }
    }
}

#[test]
fn gpu_generation_agrees_with_the_cpu_and_its_log_probabilities_with_training() {
    let cfg = TransformerConfig::from_tiny(&TinyModelConfig::default()).unwrap();
    let vocab = cfg.vocab_size;
    let policy = random_policy(cfg, &Device::Cpu, DType::F32, 5);
    let model = policy.to_gpu(gpu(), 128).unwrap();
    let prompts = prompts(&mut Rng::new(23), 4, 10, vocab);

    // Greedy: the same 32 tokens per row, and the same log-probabilities.
    let greedy = Sampling::greedy();
    let cpu = policy.generate(&prompts, 32, &[], &greedy).unwrap();
    let on_gpu = gpu_path::generate(&model, &prompts, 32, &[], &greedy).unwrap();
    for (row, (c, g)) in cpu.iter().zip(&on_gpu).enumerate() {
        assert_eq!(c.tokens, g.tokens, "row {row}: greedy tokens");
        assert!(
            max_abs(&c.logprobs, &g.logprobs) <= 1e-3,
            "row {row}: greedy log-probabilities"
        );
    }

    // Sampled: a seed reproduces itself, another seed draws otherwise.
    let sampling = Sampling {
        temperature: 1.0,
        top_p: 0.95,
        top_k: 0,
        seed: 11,
    };
    let first = gpu_path::generate(&model, &prompts, 24, &[], &sampling).unwrap();
    assert_eq!(
        first,
        gpu_path::generate(&model, &prompts, 24, &[], &sampling).unwrap()
    );
    let other = Sampling {
        seed: 12,
        ..sampling.clone()
    };
    assert_ne!(
        first,
        gpu_path::generate(&model, &prompts, 24, &[], &other).unwrap()
    );

    // Each sampled token's log-probability is the training forward's.
    for (row, (prompt, generated)) in prompts.iter().zip(&first).enumerate() {
        let sequence: Vec<u32> = prompt.iter().chain(&generated.tokens).copied().collect();
        let n = sequence.len();
        let ids = Tensor::from_vec(sequence.clone(), (1, n), &Device::Cpu).unwrap();
        let logits = policy.forward_train(&ids, None).unwrap();
        let inputs = logits.i((.., ..n - 1, ..)).unwrap().contiguous().unwrap();
        let targets = Tensor::from_vec(sequence[1..].to_vec(), (1, n - 1), &Device::Cpu).unwrap();
        let (picked, _) = model::target_logprobs_and_entropy(&inputs, &targets).unwrap();
        let picked = to_vec(&picked);
        let trained = &picked[prompt.len() - 1..];
        let d = max_abs(trained, &generated.logprobs);
        assert!(
            d <= 1e-3,
            "row {row}: sampled log-probabilities differ from training's by {d}"
        );
    }
}

#[test]
fn smollm2_on_the_gpu_in_f32_and_q4_1_gives_the_cpu_paths_logits() {
    let gguf = Gguf::open(&require(model::smollm2_gguf())).unwrap();
    // The dequantised policy: the f32 model, and exactly the values the Q4_1 blocks hold.
    let policy = gguf.load_policy(&Device::Cpu, DType::F32).unwrap();
    let chat = smollm2_prompt(&gguf);
    let prompts = vec![
        chat.clone(),
        chat[..chat.len() / 2].to_vec(),
        chat[3..9].to_vec(),
    ];
    let f32_model = policy.to_gpu(gpu(), 256).unwrap();
    assert_logits_match("SmolLM2 f32", &policy, &f32_model, &prompts);
    assert_logits_match("SmolLM2 f32", &policy, &f32_model, &prompts[..1]);
    drop(f32_model);
    let q4_model = gguf.load_gpu(gpu(), 256).unwrap();
    assert_logits_match("SmolLM2 Q4_1", &policy, &q4_model, &prompts);

    let greedy = Sampling::greedy();
    let cpu = policy.generate(&prompts[..1], 32, &[], &greedy).unwrap();
    let on_gpu = gpu_path::generate(&q4_model, &prompts[..1], 32, &[], &greedy).unwrap();
    assert_eq!(
        cpu[0].tokens, on_gpu[0].tokens,
        "SmolLM2 Q4_1 greedy tokens"
    );
}

#[test]
fn a_refresh_after_a_weight_change_moves_the_gpu_logits_with_the_policy() {
    let cfg = tiny(Architecture::Qwen3, true, false);
    let vocab = cfg.vocab_size;
    let policy = random_policy(cfg, &Device::Cpu, DType::F32, 9);
    let mut model = policy.to_gpu(gpu(), 64).unwrap();
    let prompts = prompts(&mut Rng::new(4), 3, 8, vocab);
    // Change two tensors as an optimizer step would, one of them inside the fused QKV product.
    for name in [
        "model.layers.1.self_attn.k_proj.weight",
        "model.embed_tokens.weight",
    ] {
        let var = &policy.vars()[name];
        let bumped = (var.as_tensor() * 1.5).unwrap();
        var.set(&bumped).unwrap();
    }
    let stale = gpu_logits(&model, &prompts, &[1, 2, 3]).0;
    let (fresh_cpu, _) = cpu_logits(&policy, &prompts, &[1, 2, 3]);
    assert!(
        max_abs(&stale, &fresh_cpu) > 1e-2,
        "the change shows on the CPU path"
    );
    let written = gpu_path::refresh(
        &mut model,
        &policy,
        &[
            "model.layers.1.self_attn.k_proj.weight",
            "model.embed_tokens.weight",
        ],
    )
    .unwrap();
    let k_proj = policy.vars()["model.layers.1.self_attn.k_proj.weight"].elem_count();
    assert_eq!(
        written,
        4 * (k_proj + policy.vars()["model.embed_tokens.weight"].elem_count()) as u64
    );
    assert_logits_match("refreshed tiny Qwen3", &policy, &model, &prompts);
    let error =
        gpu_path::refresh(&mut model, &policy, &["model.layers.9.mlp.up_proj.weight"]).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("model.layers.9.mlp.up_proj.weight"),
        "{error}"
    );
}

/// Metrics that measure time or speed, which the two paths need not share.
fn is_timing(key: &str) -> bool {
    key.contains("secs") || key.contains("per_sec") || key.starts_with("time/")
}

#[test]
fn an_rl_job_with_generation_on_wgpu_runs_as_the_cpu_job_does() {
    use envace::config::GenerationPlacement;

    let dir = tempfile::tempdir().unwrap();
    let mut greedy = crate::rl_phase::tiny();
    greedy.rl.temperature = 0.0;
    let cpu = crate::rl_phase::run_job(&greedy, &dir.path().join("cpu.sqlite"));
    // Greedy: both roles on the GPU give the same episodes, so every metric but the clocks
    // equals the CPU job's.
    let mut on_gpu = greedy.clone();
    on_gpu.backend.act_generation = GenerationPlacement::Wgpu;
    on_gpu.backend.rehearse_generation = GenerationPlacement::Wgpu;
    let gpu_metrics = crate::rl_phase::run_job(&on_gpu, &dir.path().join("gpu.sqlite"));
    let keys = |m: &std::collections::BTreeMap<(u64, String), f64>| {
        m.keys()
            .filter(|(_, k)| !is_timing(k))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(&cpu),
        keys(&gpu_metrics),
        "the same metrics at the same steps"
    );
    let rl_keys: Vec<_> = keys(&cpu)
        .into_iter()
        .filter(|(_, k)| k.starts_with("rl/"))
        .collect();
    assert!(!rl_keys.is_empty());
    for key in &rl_keys {
        let (c, g) = (cpu[key], gpu_metrics[key]);
        assert!(
            (c - g).abs() <= 1e-3 * c.abs().max(1.0),
            "{key:?}: {c} on the CPU, {g} with generation on wgpu"
        );
    }

    // Sampled, rehearsal alone on the GPU (the acting role stays on the CPU): the job runs to
    // its end with the same metrics recorded, and the policy's weights move between steps.
    let mut sampled = crate::rl_phase::tiny();
    sampled.backend.rehearse_generation = GenerationPlacement::Wgpu;
    let metrics = crate::rl_phase::run_job(&sampled, &dir.path().join("sampled.sqlite"));
    let reference =
        crate::rl_phase::run_job(&crate::rl_phase::tiny(), &dir.path().join("ref.sqlite"));
    assert_eq!(keys(&metrics), keys(&reference));
    for ((step, key), value) in &metrics {
        assert!(value.is_finite(), "{key} at step {step} is {value}");
    }
}

#[test]
fn a_wgpu_placement_without_an_adapter_fails_at_the_start_naming_the_backends_tried() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::rl_phase::tiny();
    config.backend.rehearse_generation = envace::config::GenerationPlacement::Wgpu;
    config.backend.wgpu_adapter = "no such adapter".to_owned();
    let store_path = dir.path().join("runs.sqlite");
    let store = envace::store::Store::open(&store_path).unwrap();
    let run = store.create_run(&config.run.name, "").unwrap();
    drop(store);
    let spec = envace::controller::JobSpec {
        config,
        config_toml: String::new(),
        store_path: store_path.clone(),
        resume: None,
    };
    let error =
        envace::controller::train(&spec, run, &mut envace::controller::NoHooks).unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("wgpu")
            && message.contains("vulkan")
            && message.contains("no such adapter"),
        "{message}"
    );
    // Nothing trained: no SFT step was recorded before the refusal.
    let store = envace::store::Store::open(&store_path).unwrap();
    assert!(store.view().metrics(run).unwrap().is_empty());

    // `device = "wgpu"` places rehearsal there (training stays on the CPU), so it is checked
    // at the start in the same way.
    let mut config = crate::rl_phase::tiny();
    config.backend.device = envace::config::Device::Wgpu;
    config.backend.wgpu_adapter = "no such adapter".to_owned();
    assert_eq!(
        config.backend.rehearse_placement(),
        envace::config::GenerationPlacement::Wgpu
    );
    assert_eq!(
        config.backend.act_placement(),
        envace::config::GenerationPlacement::Model
    );
    let run = store.create_run(&config.run.name, "").unwrap();
    drop(store);
    let spec = envace::controller::JobSpec {
        config,
        config_toml: String::new(),
        store_path: store_path.clone(),
        resume: None,
    };
    let error =
        envace::controller::train(&spec, run, &mut envace::controller::NoHooks).unwrap_err();
    assert!(error.to_string().contains("no such adapter"), "{error}");
}

/// `serve-model --device wgpu`: SmolLM2 served from the GPU (its Q4_1 blocks kept quantised
/// there, and dequantised to f32) answers concurrent greedy requests, batched, with the text
/// the CPU server on the dequantised weights gives, and its next-token logits are the CPU's.
#[test]
fn serve_model_on_wgpu_answers_as_the_cpu_server_does() {
    use envace::openai::ChatMsg;
    use envace::serve::{LoadedModel, ServeOptions, serve};

    use crate::serve::{any_port, client, greedy};

    let path = require(model::smollm2_gguf());
    let questions = [
        "What is the capital of France? Answer in one sentence.",
        "Name a primary colour.",
        "What is 2 plus 2?",
    ];
    let options = ServeOptions {
        max_batch: 8,
        // Long enough for the client threads to queue their requests together.
        batch_window: std::time::Duration::from_millis(300),
        ..ServeOptions::default()
    };
    let answers = |model: LoadedModel| {
        let server = serve(model, any_port(), &options).expect("the server starts");
        let client = client(&server.url(), 300.0, 0);
        let threads: Vec<_> = questions
            .iter()
            .map(|q| {
                let client = client.clone();
                let req = greedy(vec![ChatMsg::user(*q)], 12);
                std::thread::spawn(move || client.complete(&req))
            })
            .collect();
        let replies: Vec<String> = threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap()
                    .expect("every request is answered")
                    .content
            })
            .collect();
        let stats = server.stats();
        server.shutdown();
        (replies, stats)
    };

    let mut cpu = LoadedModel::from_path_dequantized(&path).unwrap();
    let gguf = Gguf::open(&path).unwrap();
    let prompt = smollm2_prompt(&gguf);
    let cpu_logits = cpu.next_token_logits(&prompt).unwrap();
    let (cpu_replies, _) = answers(cpu);
    assert!(cpu_replies[0].contains("Paris"), "{cpu_replies:?}");

    for (what, loaded) in [
        ("Q4_1", LoadedModel::from_path(&path).unwrap()),
        ("f32", LoadedModel::from_path_dequantized(&path).unwrap()),
    ] {
        let mut on_gpu = loaded.onto_gpu(gpu()).unwrap();
        assert!(
            on_gpu.weights().starts_with("weights on wgpu: "),
            "{}",
            on_gpu.weights()
        );
        let logits = on_gpu.next_token_logits(&prompt).unwrap();
        let diff = max_abs(&cpu_logits, &logits);
        assert!(
            diff <= 1e-3,
            "SmolLM2 {what} on wgpu: logits {diff} from the CPU's"
        );
        let (replies, stats) = answers(on_gpu);
        assert_eq!(replies, cpu_replies, "SmolLM2 {what} on wgpu");
        assert!(stats.max_batch_seen >= 2, "no batching: {stats:?}");
    }
}
