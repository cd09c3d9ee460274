// Embedding gather: row i of `out` is row tokens[i] of `table`.
// Bindings: 0 params, 1 tokens (n_tokens ids, each below the table's rows), 2 table
// (rows x hidden), 3 out (n_tokens x hidden).
// Workgroup: 64 invocations along the hidden size; grid x = ceil(hidden / 64), y = token.

struct Params {
    n_tokens: u32,
    hidden: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col = gid.x;
    let row = gid.y;
    if (col >= p.hidden || row >= p.n_tokens) {
        return;
    }
    out[row * p.hidden + col] = table[tokens[row] * p.hidden + col];
}
