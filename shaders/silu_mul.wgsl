// The SwiGLU gate: out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i], where each row of
// gate_up holds the gate projection's outputs followed by the up projection's (one fused
// product) and silu(g) = g / (1 + exp(-g)).
// Bindings: 0 params, 1 gate_up (rows x 2 * inter), 2 out (rows x inter).
// Workgroup: 64 invocations; grid x = ceil(inter / 64), y = row.

struct Params {
    rows: u32,
    inter: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gate_up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let r = gid.y;
    if (i >= p.inter || r >= p.rows) {
        return;
    }
    let g = gate_up[r * 2u * p.inter + i];
    let u = gate_up[r * 2u * p.inter + p.inter + i];
    out[r * p.inter + i] = g / (1.0 + exp(-g)) * u;
}
