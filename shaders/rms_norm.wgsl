// RMSNorm: dst[r, :] = src[r, :] / sqrt(mean(src[r, :]^2) + eps) * weight.
// Row r of src starts at src_offset + r * src_stride (so the last position of each sequence can
// be picked out of a batch of them); dst is contiguous, rows x dim.
// Bindings: 0 params, 1 src, 2 weight (dim), 3 dst.
// Workgroup: 256 invocations per row; grid x = rows.

//#include lib/reduce.wgsl

struct Params {
    rows: u32,
    dim: u32,
    src_stride: u32,
    src_offset: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
    let row = wid.x;
    let lid = lid3.x;
    let base = p.src_offset + row * p.src_stride;
    var squares = 0.0;
    for (var i = lid; i < p.dim; i = i + WG) {
        let v = src[base + i];
        squares = squares + v * v;
    }
    let total = wg_sum(lid, squares);
    let scale = inverseSqrt(total / f32(p.dim) + p.eps);
    for (var i = lid; i < p.dim; i = i + WG) {
        dst[row * p.dim + i] = src[base + i] * scale * weight[i];
    }
}
