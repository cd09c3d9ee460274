// Matrix product with f32 weights: out[m, n] = sum over k of x[m, k] * w[n, k] (w is stored as
// the model stores a linear layer's weight, out_features x in_features).
// Row m of x starts at x_offset + m * x_stride; row m of out at out_offset + m * out_stride.
// Each invocation computes a 4 x 4 register tile (four rows of x against four rows of w, 16
// multiply-adds per 8 loads) with no workgroup memory and no barriers, which suits decoding's
// few rows and CPU implementations such as lavapipe alike. Edge tiles read clamped indices and
// store only what is inside.
// Bindings: 0 params, 1 x, 2 w (n x k), 3 out.
// Workgroup: 64 invocations along n; grid x = ceil(n / 256), y = ceil(m / 4).

//#include lib/matmul.wgsl

@group(0) @binding(2) var<storage, read> w: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col0 = gid.x * 4u;
    let row0 = gid.y * 4u;
    if (col0 >= p.n || row0 >= p.m) {
        return;
    }
    let xs = tile_starts(row0, p.m, p.x_stride, p.x_offset);
    let ws = tile_starts(col0, p.n, p.k, 0u);
    var acc = mat4x4<f32>();
    for (var kk = 0u; kk < p.k; kk = kk + 1u) {
        let wv = vec4<f32>(w[ws.x + kk], w[ws.y + kk], w[ws.z + kk], w[ws.w + kk]);
        acc[0] = acc[0] + x[xs.x + kk] * wv;
        acc[1] = acc[1] + x[xs.y + kk] * wv;
        acc[2] = acc[2] + x[xs.z + kk] * wv;
        acc[3] = acc[3] + x[xs.w + kk] * wv;
    }
    store_tile(row0, col0, acc);
}
