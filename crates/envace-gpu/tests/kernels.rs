//! Each kernel against its CPU reference over property-tested shapes (odd sizes, sizes that do
//! not divide the workgroup, batch 1 and 16, strided rows, masks), on whatever adapter
//! `Gpu::open` finds: lavapipe on a machine without a GPU.
//!
//! Tolerances: exact for copies (embedding, cache writes); products and norms within 1e-5 of
//! the largest magnitude involved times the square root of the summed length (f32 sums in
//! another order than the reference's f64); a sampled token must lie where the reference's draw
//! falls, up to 1e-5 of the kept mass at its edges.
#![allow(clippy::unwrap_used)] // Tests may unwrap: a panic here is the test failing, with the value.

use std::sync::OnceLock;

use envace_gpu::reference;
use envace_gpu::{Gpu, Heads, Rows, SampleParams, Weight, WeightFormat};
use proptest::prelude::*;

fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| Gpu::open(None).unwrap_or_else(|e| panic!("{e}")))
}

/// SplitMix64: the tests' data from one proptest-drawn seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn signed(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.signed()).collect()
    }
}

/// Asserts `got` is within `tol` of `want` everywhere, naming the first index that is not.
fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (idx, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol || (g.is_nan() && w.is_nan()),
            "{what}: at {idx} the GPU gave {g}, the reference {w} (tolerance {tol})"
        );
    }
}

fn batch_rows() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1usize), Just(16usize), 1usize..40]
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 16,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn embed_gathers_rows(seed: u64, n_tokens in batch_rows(), vocab in 1usize..60, hidden in 1usize..300) {
        let mut rng = Rng(seed);
        let table = rng.values(vocab * hidden);
        let tokens: Vec<u32> = (0..n_tokens).map(|_| rng.below(vocab) as u32).collect();
        let g = gpu();
        let (t, tb, out) = (
            g.upload("tokens", &tokens).unwrap(),
            g.upload("table", &table).unwrap(),
            g.zeros("out", n_tokens * hidden).unwrap(),
        );
        let mut batch = g.batch();
        batch.embed(&t, &tb, &out, n_tokens, hidden).unwrap();
        g.submit(batch).unwrap();
        prop_assert_eq!(g.read::<f32>(&out).unwrap(), reference::embed(&tokens, &table, hidden));
    }

    #[test]
    fn rms_norm_matches(seed: u64, rows in batch_rows(), dim in 1usize..700, pad in 0usize..5, offset in 0usize..7) {
        let mut rng = Rng(seed);
        let src = Rows { rows, dim, stride: dim + pad, offset };
        let values = rng.values(src.extent());
        let weight = rng.values(dim);
        let g = gpu();
        let (s, w, out) = (
            g.upload("src", &values).unwrap(),
            g.upload("weight", &weight).unwrap(),
            g.zeros("dst", rows * dim).unwrap(),
        );
        let mut batch = g.batch();
        batch.rms_norm(&s, src, &w, &out, 1e-6).unwrap();
        g.submit(batch).unwrap();
        let want = reference::rms_norm(&values, src, &weight, 1e-6);
        // Normalised values are at most sqrt(dim) times the largest weight.
        assert_close("rms_norm", &g.read::<f32>(&out).unwrap(), &want, 1e-5 * (dim as f32).sqrt());
    }

    #[test]
    fn rope_matches_with_and_without_the_head_norm(
        seed: u64,
        n_tokens in batch_rows(),
        n_heads in 1usize..5,
        half in prop_oneof![Just(32usize), Just(64usize), 1usize..70],
        pad in 0usize..9,
        offset in 0usize..9,
        use_norm: bool,
    ) {
        let mut rng = Rng(seed);
        let head_dim = 2 * half;
        let x = Heads { n_tokens, n_heads, head_dim, stride: n_heads * head_dim + pad, offset };
        let mut values = rng.values(x.extent());
        let n_positions = 300;
        let inv_freq: Vec<f64> = (0..half).map(|i| 1.0 / 10_000f64.powf(2.0 * i as f64 / head_dim as f64)).collect();
        let table = reference::rope_table(&inv_freq, n_positions);
        let positions: Vec<u32> = (0..n_tokens).map(|_| rng.below(n_positions) as u32).collect();
        let weight = rng.values(head_dim);
        let g = gpu();
        let (xb, pb, tb, wb) = (
            g.upload("x", &values).unwrap(),
            g.upload("positions", &positions).unwrap(),
            g.upload("cos_sin", &table).unwrap(),
            g.upload("norm", &weight).unwrap(),
        );
        let mut batch = g.batch();
        batch.rope(&xb, x, &pb, &tb, use_norm.then_some((&wb, 1e-6))).unwrap();
        g.submit(batch).unwrap();
        reference::rope(&mut values, x, &positions, &table, use_norm.then_some((&weight[..], 1e-6)));
        assert_close("rope", &g.read::<f32>(&xb).unwrap(), &values, 1e-5 * (head_dim as f32).sqrt());
    }

    #[test]
    fn matmul_f32_matches(
        seed: u64,
        m in batch_rows(),
        n in 1usize..90,
        k in 1usize..150,
        x_pad in 0usize..4,
        out_pad in 0usize..4,
        offset in 0usize..5,
    ) {
        let mut rng = Rng(seed);
        let x = Rows { rows: m, dim: k, stride: k + x_pad, offset };
        let out = Rows { rows: m, dim: n, stride: n + out_pad, offset: 2 * offset };
        let xv = rng.values(x.extent());
        let wv = rng.values(n * k);
        let g = gpu();
        let weight = Weight { buf: g.upload("w", &wv).unwrap(), n, k, format: WeightFormat::F32 };
        let (xb, ob) = (g.upload("x", &xv).unwrap(), g.zeros("out", out.extent()).unwrap());
        let mut batch = g.batch();
        batch.matmul(&xb, x, &weight, &ob, out).unwrap();
        g.submit(batch).unwrap();
        let mut want = vec![0f32; out.extent()];
        reference::matmul(&xv, x, &wv, n, &mut want, out);
        assert_close("matmul", &g.read::<f32>(&ob).unwrap(), &want, 1e-5 * (k as f32).sqrt());
    }

    #[test]
    fn quantised_matmuls_match_the_dequantised_weights(
        seed: u64,
        m in batch_rows(),
        n in 1usize..50,
        blocks in 1usize..6,
        q8: bool,
        x_pad in 0usize..4,
    ) {
        let mut rng = Rng(seed);
        let k = 32 * blocks;
        let block_bytes = if q8 { 34 } else { 20 };
        let mut raw = Vec::with_capacity(n * blocks * block_bytes);
        for _ in 0..n * blocks {
            let d = half::f16::from_f32(0.001 + 0.05 * rng.signed().abs());
            raw.extend(d.to_le_bytes());
            if !q8 {
                raw.extend(half::f16::from_f32(0.1 * rng.signed()).to_le_bytes());
            }
            raw.extend((0..if q8 { 32 } else { 16 }).map(|_| rng.next() as u8));
        }
        let (words, dense, format) = if q8 {
            (reference::q8_0_words(&raw), reference::dequant_q8_0(&raw), WeightFormat::Q8_0)
        } else {
            (reference::q4_1_words(&raw), reference::dequant_q4_1(&raw), WeightFormat::Q4_1)
        };
        let x = Rows { rows: m, dim: k, stride: k + x_pad, offset: 1 };
        let out = Rows::dense(m, n);
        let xv = rng.values(x.extent());
        let g = gpu();
        let weight = Weight { buf: g.upload("w", &words).unwrap(), n, k, format };
        let (xb, ob) = (g.upload("x", &xv).unwrap(), g.zeros("out", out.extent()).unwrap());
        let mut batch = g.batch();
        batch.matmul(&xb, x, &weight, &ob, out).unwrap();
        g.submit(batch).unwrap();
        let mut want = vec![0f32; out.extent()];
        reference::matmul(&xv, x, &dense, n, &mut want, out);
        assert_close("quantised matmul", &g.read::<f32>(&ob).unwrap(), &want, 1e-4 * (k as f32).sqrt());
    }

    #[test]
    fn cache_writes_and_attention_match_with_masks(
        seed: u64,
        rows in prop_oneof![Just(1usize), Just(16usize), 1usize..5],
        tokens_per_row in prop_oneof![Just(1usize), 1usize..7],
        n_kv in 1usize..3,
        group in 1usize..4,
        head_dim in prop_oneof![Just(64usize), Just(128usize), Just(256usize), 1usize..40],
        capacity_extra in 0usize..150,
    ) {
        let mut rng = Rng(seed);
        let n_heads = n_kv * group;
        let capacity = tokens_per_row + capacity_extra;
        let n_tokens = rows * tokens_per_row;
        // Fused rows: queries, keys, values, as a QKV projection leaves them.
        let stride = (n_heads + 2 * n_kv) * head_dim;
        let qkv = rng.values(n_tokens * stride);
        let keys = Heads { n_tokens, n_heads: n_kv, head_dim, stride, offset: n_heads * head_dim };
        let v_offset = (n_heads + n_kv) * head_dim;
        let q = Heads { n_tokens, n_heads, head_dim, stride, offset: 0 };
        // Each row's new tokens at consecutive slots from a random start; earlier slots hold
        // older keys, some of them padding (mask 0), and slots after are empty.
        let mut slots = Vec::with_capacity(n_tokens);
        let mut key_mask = vec![0u32; rows * capacity];
        for r in 0..rows {
            let start = rng.below(capacity - tokens_per_row + 1);
            let padding = rng.below(start + 1);
            for s in padding..start + tokens_per_row {
                key_mask[r * capacity + s] = u32::from(s >= start || rng.below(4) != 0);
            }
            slots.extend((start..start + tokens_per_row).map(|s| s as u32));
        }
        let cache_len = rows * n_kv * capacity * head_dim;
        let mut k_cache = rng.values(cache_len);
        let mut v_cache = rng.values(cache_len);
        let g = gpu();
        let (src, sb, mb, kb, vb, ob) = (
            g.upload("qkv", &qkv).unwrap(),
            g.upload("slots", &slots).unwrap(),
            g.upload("key_mask", &key_mask).unwrap(),
            g.upload("k_cache", &k_cache).unwrap(),
            g.upload("v_cache", &v_cache).unwrap(),
            g.zeros("out", n_tokens * n_heads * head_dim).unwrap(),
        );
        let mut batch = g.batch();
        batch.kv_write(&src, keys, v_offset, &sb, tokens_per_row, capacity, &kb, &vb).unwrap();
        batch.attention(&src, q, n_kv, tokens_per_row, capacity, &kb, &vb, &mb, &sb, &ob).unwrap();
        g.submit(batch).unwrap();
        reference::kv_write(&qkv, keys, v_offset, &slots, tokens_per_row, capacity, &mut k_cache, &mut v_cache);
        prop_assert_eq!(g.read::<f32>(&kb).unwrap(), k_cache.clone());
        prop_assert_eq!(g.read::<f32>(&vb).unwrap(), v_cache.clone());
        let want = reference::attention(&qkv, q, n_kv, tokens_per_row, capacity, &k_cache, &v_cache, &key_mask, &slots);
        assert_close("attention", &g.read::<f32>(&ob).unwrap(), &want, 1e-5 * (head_dim as f32).sqrt());
    }

    #[test]
    fn silu_gate_and_residual_add_match(seed: u64, rows in batch_rows(), inter in 1usize..300) {
        let mut rng = Rng(seed);
        let gate_up: Vec<f32> = rng.values(rows * 2 * inter).iter().map(|v| 6.0 * v).collect();
        let residual = rng.values(rows * inter);
        let g = gpu();
        let (gb, ob, rb) = (
            g.upload("gate_up", &gate_up).unwrap(),
            g.zeros("out", rows * inter).unwrap(),
            g.upload("residual", &residual).unwrap(),
        );
        let mut batch = g.batch();
        batch.silu_mul(&gb, &ob, rows, inter).unwrap();
        batch.add(&rb, &ob, rows * inter).unwrap();
        g.submit(batch).unwrap();
        let gated = reference::silu_mul(&gate_up, rows, inter);
        assert_close("silu_mul", &g.read::<f32>(&ob).unwrap(), &gated, 1e-5);
        let summed: Vec<f32> = residual.iter().zip(&gated).map(|(a, b)| a + b).collect();
        assert_close("add", &g.read::<f32>(&rb).unwrap(), &summed, 1e-5);
    }

    #[test]
    fn sampling_picks_where_the_reference_draw_falls(
        seed: u64,
        rows in prop_oneof![Just(1usize), Just(16usize), 1usize..20],
        vocab in prop_oneof![Just(1usize), 2usize..100, 1000usize..3000],
        temperature in prop_oneof![Just(0.0f32), Just(1.0f32), 0.3f32..2.0],
        top_p in prop_oneof![Just(1.0f32), 0.05f32..1.0],
        top_k in prop_oneof![Just(0u32), Just(1u32), 2u32..50],
        step in 0u32..1000,
        scale in prop_oneof![Just(1.0f32), Just(8.0f32)],
    ) {
        let mut rng = Rng(seed);
        let logits: Vec<f32> = rng.values(rows * vocab).iter().map(|v| scale * v).collect();
        let params = SampleParams { temperature, top_p, top_k, seed: rng.next(), step, row_base: 3 };
        let g = gpu();
        let (lb, scratch, tb, pb) = (
            g.upload("logits", &logits).unwrap(),
            g.zeros("weights", rows * vocab).unwrap(),
            g.zeros("tokens", rows).unwrap(),
            g.zeros("logprobs", rows).unwrap(),
        );
        let mut batch = g.batch();
        batch.sample(&lb, rows, vocab, &scratch, &tb, &pb, params).unwrap();
        g.submit(batch).unwrap();
        let tokens = g.read::<u32>(&tb).unwrap();
        let logprobs = g.read::<f32>(&pb).unwrap();
        for r in 0..rows {
            let row = &logits[r * vocab..][..vocab];
            let pick = reference::sample(row, params, r as u32);
            let token = tokens[r];
            match &pick.draw {
                None => prop_assert_eq!(token, pick.token, "row {} (greedy)", r),
                Some((goal, kept)) => {
                    let mass = kept.last().map_or(0.0, |k| k.2);
                    let slack = 1e-5 * mass;
                    let place = kept.iter().find(|k| k.0 == token);
                    prop_assert!(
                        place.is_some_and(|&(_, before, after)| before - slack <= *goal && *goal <= after + slack),
                        "row {}: the GPU picked {} at {:?}, the reference's draw {} falls on {}",
                        r, token, place, goal, pick.token
                    );
                }
            }
            let want = (f64::from(row[token as usize]) - f64::from(row[pick.token as usize]) + f64::from(pick.logprob)) as f32;
            prop_assert!((logprobs[r] - want).abs() <= 1e-4, "row {}: log-probability {} against {}", r, logprobs[r], want);
        }
    }
}

#[test]
fn a_row_that_is_not_a_distribution_gives_its_first_largest_token_and_nan() {
    let g = gpu();
    let logits = [
        f32::NAN,
        1.0,
        f32::INFINITY,
        f32::INFINITY, // +inf: the first one
        f32::NAN,
        f32::NAN,
        f32::NAN,
        f32::NAN, // all NaN: token 0
        f32::NEG_INFINITY,
        2.0,
        f32::NAN,
        2.0, // NaN counts as -inf; a tie picks the first
    ];
    let (lb, scratch, tb, pb) = (
        g.upload("logits", &logits).unwrap(),
        g.zeros("weights", 12).unwrap(),
        g.zeros("tokens", 3).unwrap(),
        g.zeros("logprobs", 3).unwrap(),
    );
    let params = SampleParams {
        temperature: 0.0,
        top_p: 1.0,
        top_k: 0,
        seed: 7,
        step: 0,
        row_base: 0,
    };
    let mut batch = g.batch();
    batch.sample(&lb, 3, 4, &scratch, &tb, &pb, params).unwrap();
    g.submit(batch).unwrap();
    assert_eq!(g.read::<u32>(&tb).unwrap(), [2, 0, 1]);
    let logprobs = g.read::<f32>(&pb).unwrap();
    assert!(logprobs[0].is_nan() && logprobs[1].is_nan(), "{logprobs:?}");
    assert!((logprobs[2] - 0.5f32.ln()).abs() < 1e-6, "{logprobs:?}");
}

#[test]
fn a_seeded_draw_reproduces_itself_and_a_new_step_draws_anew() {
    let g = gpu();
    let vocab = 500;
    let logits = vec![0f32; 16 * vocab];
    let run = |seed: u64, step: u32| {
        let (lb, scratch, tb, pb) = (
            g.upload("logits", &logits).unwrap(),
            g.zeros("weights", 16 * vocab).unwrap(),
            g.zeros("tokens", 16).unwrap(),
            g.zeros("logprobs", 16).unwrap(),
        );
        let params = SampleParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed,
            step,
            row_base: 0,
        };
        let mut batch = g.batch();
        batch
            .sample(&lb, 16, vocab, &scratch, &tb, &pb, params)
            .unwrap();
        g.submit(batch).unwrap();
        g.read::<u32>(&tb).unwrap()
    };
    let first = run(42, 0);
    assert_eq!(run(42, 0), first);
    assert_ne!(run(42, 1), first);
    assert_ne!(run(43, 0), first);
    // Uniform logits: 16 rows spread over the vocabulary rather than one token.
    let distinct: std::collections::BTreeSet<u32> = first.iter().copied().collect();
    assert!(distinct.len() > 8, "{first:?}");
}

#[test]
fn shapes_that_disagree_with_the_buffers_are_refused_before_dispatch() {
    let g = gpu();
    let x = g.upload("activations", &[0f32; 10]).unwrap();
    let out = g.zeros("product", 4).unwrap();
    let w = Weight {
        buf: g.upload("weight", &[0f32; 8]).unwrap(),
        n: 2,
        k: 4,
        format: WeightFormat::F32,
    };
    let mut batch = g.batch();
    let error = batch
        .matmul(&x, Rows::dense(3, 4), &w, &out, Rows::dense(3, 2))
        .unwrap_err();
    expect_test::expect!["kernel matmul.wgsl: activations holds 10 values, the call reaches 12"]
        .assert_eq(&error.to_string());
    let error = batch.add(&x, &x, 4).unwrap_err();
    expect_test::expect![
        "kernel add.wgsl: activations is both read and written; the kernel needs two buffers"
    ]
    .assert_eq(&error.to_string());
    let q = Weight {
        buf: g.upload("blocks", &[0u32; 10]).unwrap(),
        n: 1,
        k: 48,
        format: WeightFormat::Q4_1,
    };
    let error = batch
        .matmul(&x, Rows::dense(1, 48), &q, &out, Rows::dense(1, 1))
        .unwrap_err();
    expect_test::expect![
        "kernel matmul_q4_1.wgsl: a quantised weight's row length 48 is not a multiple of 32"
    ]
    .assert_eq(&error.to_string());
    assert!(batch.is_empty());
}
