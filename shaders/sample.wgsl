// Softmax and token picking for each row of logits: greedy (temperature 0 or top_k 1: the first
// most likely token), or a draw at `temperature` from the tokens kept by top_k (0 keeps all)
// and then top_p (the most likely tokens whose probability reaches top_p), walked in vocabulary
// order. The draw is uniform01(seed, row_base + row, step) (lib/rng.wgsl). Each picked token's
// log-probability is at temperature 1 over the whole vocabulary, as the CPU path reports it.
// A row whose largest logit is infinite (or all NaN) is data, not a distribution: its first
// largest token is picked with a NaN log-probability. NaN logits count as -inf.
// The cut-offs are thresholds on the weights exp((logit - max) / temperature), found by
// bisection (count and mass of the weights at or above a threshold), so ties at the cut-off
// are all kept where a sort would keep some.
// Bindings: 0 params, 1 logits (rows x vocab), 2 weights (rows x vocab, scratch), 3 tokens
// (rows), 4 logprobs (rows).
// Workgroup: 256 invocations per row; grid x = rows.

//#include lib/reduce.wgsl
//#include lib/rng.wgsl

var<workgroup> scan: array<f32, 256>;
var<workgroup> choice: atomic<u32>;
var<workgroup> last_kept: atomic<u32>;

struct Params {
    rows: u32,
    vocab: u32,
    temperature: f32,
    top_p: f32,
    top_k: u32,
    seed_lo: u32,
    seed_hi: u32,
    step: u32,
    row_base: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read_write> weights: array<f32>;
@group(0) @binding(3) var<storage, read_write> tokens: array<u32>;
@group(0) @binding(4) var<storage, read_write> logprobs: array<f32>;

const NEG_INF_BITS: u32 = 0xff800000u;
const BISECTIONS: u32 = 40u;

fn logit(base: u32, i: u32) -> f32 {
    let v = logits[base + i];
    // NaN by its bits: `v != v` may be folded away by a compiler that assumes no NaNs.
    if ((bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u) {
        return bitcast<f32>(NEG_INF_BITS);
    }
    return v;
}

// How many weights of the row are at or above `tau`.
fn count_at_least(lid: u32, base: u32, tau: f32) -> u32 {
    var n = 0u;
    for (var i = lid; i < p.vocab; i = i + WG) {
        if (weights[base + i] >= tau) {
            n = n + 1u;
        }
    }
    return wg_sum_u(lid, n);
}

// The sum of the row's weights at or above `tau`.
fn mass_at_least(lid: u32, base: u32, tau: f32) -> f32 {
    var s = 0.0;
    for (var i = lid; i < p.vocab; i = i + WG) {
        let w = weights[base + i];
        if (w >= tau) {
            s = s + w;
        }
    }
    return wg_sum(lid, s);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let row = wid.x;
    let lid = lid3.x;
    let base = row * p.vocab;
    let neg_inf = bitcast<f32>(NEG_INF_BITS);

    var best = neg_inf;
    var best_idx = 0xffffffffu;
    for (var i = lid; i < p.vocab; i = i + WG) {
        let v = logit(base, i);
        if (v > best) {
            best = v;
            best_idx = i;
        }
    }
    let top = wg_argmax(lid, best, best_idx);
    let max_logit = bitcast<f32>(top.x);
    var argmax = top.y;
    if (argmax == 0xffffffffu) {
        argmax = 0u;
    }
    if (abs(max_logit) > 3.4e38) {
        if (lid == 0u) {
            tokens[row] = argmax;
            logprobs[row] = bitcast<f32>(0x7fc00000u);
        }
        return;
    }

    var numerators = 0.0;
    for (var i = lid; i < p.vocab; i = i + WG) {
        numerators = numerators + exp(logit(base, i) - max_logit);
    }
    let log_sum = max_logit + log(wg_sum(lid, numerators));

    var token = argmax;
    if (p.temperature > 0.0 && p.top_k != 1u) {
        for (var i = lid; i < p.vocab; i = i + WG) {
            weights[base + i] = exp((logit(base, i) - max_logit) / p.temperature);
        }
        storageBarrier();
        workgroupBarrier();
        // tau: the smallest weight kept. 0 keeps every token.
        var tau = 0.0;
        if (p.top_k > 0u && p.top_k < p.vocab) {
            var lo = 0.0;
            var hi = 2.0;
            for (var it = 0u; it < BISECTIONS; it = it + 1u) {
                let mid = 0.5 * (lo + hi);
                if (count_at_least(lid, base, mid) >= p.top_k) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            tau = lo;
        }
        if (p.top_p < 1.0) {
            let target_mass = p.top_p * mass_at_least(lid, base, tau);
            var lo = tau;
            var hi = 2.0;
            for (var it = 0u; it < BISECTIONS; it = it + 1u) {
                let mid = 0.5 * (lo + hi);
                if (mass_at_least(lid, base, mid) >= target_mass) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            tau = lo;
        }

        // Each invocation's contiguous chunk, its kept mass, and the mass before it.
        let chunk = (p.vocab + WG - 1u) / WG;
        let begin = min(lid * chunk, p.vocab);
        let end = min(begin + chunk, p.vocab);
        var own = 0.0;
        for (var i = begin; i < end; i = i + 1u) {
            let w = weights[base + i];
            if (w >= tau && w > 0.0) {
                own = own + w;
            }
        }
        scan[lid] = own;
        if (lid == 0u) {
            atomicStore(&choice, 0xffffffffu);
            atomicStore(&last_kept, 0u);
        }
        workgroupBarrier();
        for (var offset = 1u; offset < WG; offset = offset * 2u) {
            var v = scan[lid];
            if (lid >= offset) {
                v = v + scan[lid - offset];
            }
            workgroupBarrier();
            scan[lid] = v;
            workgroupBarrier();
        }
        let kept_mass = workgroupUniformLoad(&scan[WG - 1u]);
        let before = scan[lid] - own;
        let u = uniform01(p.seed_lo, p.seed_hi, p.row_base + row, p.step);
        let goal = u * kept_mass;
        if (own > 0.0) {
            var rest = goal - before;
            for (var i = begin; i < end; i = i + 1u) {
                let w = weights[base + i];
                if (w >= tau && w > 0.0) {
                    atomicMax(&last_kept, i);
                    if (rest <= w) {
                        atomicMin(&choice, i);
                        break;
                    }
                    rest = rest - w;
                }
            }
        }
        workgroupBarrier();
        token = atomicLoad(&choice);
        if (token == 0xffffffffu) {
            token = atomicLoad(&last_kept);
        }
    }
    if (lid == 0u) {
        tokens[row] = token;
        logprobs[row] = logit(base, token) - log_sum;
    }
}
