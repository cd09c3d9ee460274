// Writes the keys and values of new tokens into a batch's KV cache. Token i belongs to batch
// row i / tokens_per_row and goes to cache slot slots[i]; its key head h is at
// src[i * src_stride + k_offset + h * head_dim ..][..head_dim] and its value head at v_offset.
// The caches are laid out (batch row, kv head, slot, head_dim) with `capacity` slots per row.
// Bindings: 0 params, 1 src, 2 slots (n_tokens), 3 k_cache, 4 v_cache.
// Workgroup: 64 invocations along kv_heads * head_dim; grid x = ceil(kv_heads * head_dim / 64),
// y = token.

struct Params {
    n_tokens: u32,
    tokens_per_row: u32,
    n_kv: u32,
    head_dim: u32,
    capacity: u32,
    src_stride: u32,
    k_offset: u32,
    v_offset: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> slots: array<u32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<f32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gid.x;
    let token = gid.y;
    if (e >= p.n_kv * p.head_dim || token >= p.n_tokens) {
        return;
    }
    let head = e / p.head_dim;
    let d = e % p.head_dim;
    let row = token / p.tokens_per_row;
    let dst = ((row * p.n_kv + head) * p.capacity + slots[token]) * p.head_dim + d;
    let at = token * p.src_stride + head * p.head_dim + d;
    k_cache[dst] = src[at + p.k_offset];
    v_cache[dst] = src[at + p.v_offset];
}
