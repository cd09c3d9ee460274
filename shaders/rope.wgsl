// Rotary position embedding in place (Hugging Face's rotate-half layout: element i pairs with
// i + head_dim / 2), optionally after a per-head RMSNorm (Qwen3's q_norm / k_norm).
// Head h of token t is at x[offset + t * stride + h * head_dim ..][..head_dim], so the query and
// key parts of a fused QKV buffer are rotated where they lie. The angles come as a table of
// (cos, sin) per position and frequency, computed on the host in f64 as the CPU path does.
// Bindings: 0 params, 1 x (read-write), 2 positions (n_tokens), 3 cos_sin (positions x
// head_dim / 2 pairs), 4 norm weight (head_dim; read only when use_norm is 1).
// Workgroup: 64 invocations over the frequency pairs of one head; grid x = token, y = head.

var<workgroup> partial: array<f32, 64>;

struct Params {
    n_tokens: u32,
    n_heads: u32,
    head_dim: u32,
    stride: u32,
    offset: u32,
    use_norm: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> cos_sin: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> norm_weight: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let token = wid.x;
    let head = wid.y;
    let lid = lid3.x;
    let half = p.head_dim / 2u;
    let base = p.offset + token * p.stride + head * p.head_dim;
    var scale = 1.0;
    if (p.use_norm == 1u) {
        var squares = 0.0;
        for (var i = lid; i < p.head_dim; i = i + 64u) {
            let v = x[base + i];
            squares = squares + v * v;
        }
        partial[lid] = squares;
        workgroupBarrier();
        for (var width = 32u; width > 0u; width = width / 2u) {
            if (lid < width) {
                partial[lid] = partial[lid] + partial[lid + width];
            }
            workgroupBarrier();
        }
        scale = inverseSqrt(partial[0] / f32(p.head_dim) + p.eps);
    }
    let pos = positions[token];
    for (var i = lid; i < half; i = i + 64u) {
        var a = x[base + i];
        var b = x[base + i + half];
        if (p.use_norm == 1u) {
            a = a * scale * norm_weight[i];
            b = b * scale * norm_weight[i + half];
        }
        let cs = cos_sin[pos * half + i];
        x[base + i] = a * cs.x - b * cs.y;
        x[base + i + half] = b * cs.x + a * cs.y;
    }
}
