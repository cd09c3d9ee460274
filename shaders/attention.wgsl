// Attention of new tokens over a batch's KV cache, with the causal mask (a query at cache slot
// s sees slots 0..=s) and the padding mask (key_mask[row, slot] = 0 hides a slot other than the
// query's own, so that a padding query still has a finite softmax), and grouped
// query heads (query head h reads kv head h / (n_heads / n_kv)). Softmax is computed online, a
// block of 64 keys at a time (running maximum and sum, the output rescaled as it grows), so the
// cache length is not bounded by workgroup memory.
// Query head h of token i is q[i * q_stride + q_offset + h * head_dim ..]; the output of token
// i is out[i * n_heads * head_dim + h * head_dim ..]; token i belongs to batch row
// i / tokens_per_row and sits at cache slot slots[i].
// Bindings: 0 params, 1 q, 2 k_cache, 3 v_cache (both row x kv head x slot x head_dim),
// 4 key_mask (row x capacity, 1 = a real token), 5 slots (n_tokens), 6 out.
// Workgroup: 64 invocations (one key each when scoring, head_dim / 64 output elements each when
// summing); head_dim at most 256; grid x = token, y = head.

const BLOCK: u32 = 64u;

var<workgroup> q_row: array<f32, 256>;
var<workgroup> weights: array<f32, 64>;
var<workgroup> scratch: array<f32, 64>;

struct Params {
    n_tokens: u32,
    tokens_per_row: u32,
    n_heads: u32,
    n_kv: u32,
    head_dim: u32,
    capacity: u32,
    q_stride: u32,
    q_offset: u32,
    scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<f32>;
@group(0) @binding(3) var<storage, read> v_cache: array<f32>;
@group(0) @binding(4) var<storage, read> key_mask: array<u32>;
@group(0) @binding(5) var<storage, read> slots: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

// The largest of `scratch` over the workgroup, left in every invocation.
fn block_max(lid: u32, value: f32) -> f32 {
    scratch[lid] = value;
    workgroupBarrier();
    for (var width = BLOCK / 2u; width > 0u; width = width / 2u) {
        if (lid < width) {
            scratch[lid] = max(scratch[lid], scratch[lid + width]);
        }
        workgroupBarrier();
    }
    let result = workgroupUniformLoad(&scratch[0]);
    workgroupBarrier();
    return result;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let token = wid.x;
    let head = wid.y;
    let lid = lid3.x;
    let d = p.head_dim;
    let row = token / p.tokens_per_row;
    let kv_head = head / (p.n_heads / p.n_kv);
    let cache_base = (row * p.n_kv + kv_head) * p.capacity;
    let last = slots[token];
    for (var i = lid; i < d; i = i + BLOCK) {
        q_row[i] = q[token * p.q_stride + p.q_offset + head * d + i];
    }
    workgroupBarrier();
    let neg_inf = bitcast<f32>(0xff800000u);
    var running_max = neg_inf;
    var running_sum = 0.0;
    var acc = vec4<f32>(0.0);
    for (var start = 0u; start <= last; start = start + BLOCK) {
        let key = start + lid;
        var score = neg_inf;
        if (key == last || (key < last && key_mask[row * p.capacity + key] != 0u)) {
            var dot = 0.0;
            let k_base = (cache_base + key) * d;
            for (var i = 0u; i < d; i = i + 1u) {
                dot = dot + q_row[i] * k_cache[k_base + i];
            }
            score = dot * p.scale;
        }
        let new_max = max(running_max, block_max(lid, score));
        if (new_max == neg_inf) {
            continue;
        }
        var weight = 0.0;
        if (score != neg_inf) {
            weight = exp(score - new_max);
        }
        weights[lid] = weight;
        workgroupBarrier();
        let rescale = exp(running_max - new_max);
        var block_sum = 0.0;
        for (var j = 0u; j < BLOCK; j = j + 1u) {
            block_sum = block_sum + weights[j];
        }
        running_sum = running_sum * rescale + block_sum;
        acc = acc * rescale;
        for (var j = 0u; j < BLOCK; j = j + 1u) {
            let wj = weights[j];
            if (wj != 0.0) {
                let v_base = (cache_base + start + j) * d;
                for (var c = 0u; c < 4u; c = c + 1u) {
                    let i = lid + c * BLOCK;
                    if (i < d) {
                        acc[c] = acc[c] + wj * v_cache[v_base + i];
                    }
                }
            }
        }
        running_max = new_max;
        workgroupBarrier();
    }
    let out_base = token * p.n_heads * d + head * d;
    for (var c = 0u; c < 4u; c = c + 1u) {
        let i = lid + c * BLOCK;
        if (i < d) {
            var value = 0.0;
            if (running_sum > 0.0) {
                value = acc[c] / running_sum;
            }
            out[out_base + i] = value;
        }
    }
}
