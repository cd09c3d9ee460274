// The residual connection in place: acc[i] += delta[i] for i below n.
// Bindings: 0 params, 1 acc (read-write), 2 delta.
// Workgroup: 256 invocations; grid x = ceil(n / 256) up to 65535, y for the rest.

struct Params {
    n: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> acc: array<f32>;
@group(0) @binding(2) var<storage, read> delta: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.y * groups.x * 256u + gid.x;
    if (i >= p.n) {
        return;
    }
    acc[i] = acc[i] + delta[i];
}
