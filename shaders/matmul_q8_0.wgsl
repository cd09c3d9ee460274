// Matrix product with GGUF Q8_0 weights, dequantised as they are read: out[m, n] = sum over k
// of x[m, k] * dequant(w)[n, k]. Each row of w is k / 32 blocks of nine words (lib/quant.wgsl);
// k is a multiple of 32. Row m of x starts at x_offset + m * x_stride; row m of out at
// out_offset + m * out_stride. Each invocation computes a 4 x 4 register tile, unpacking four
// weight rows' bytes at a time, with no workgroup memory and no barriers (see matmul.wgsl).
// Bindings: 0 params, 1 x, 2 w (blocks as words), 3 out.
// Workgroup: 64 invocations along n; grid x = ceil(n / 256), y = ceil(m / 4).

//#include lib/quant.wgsl
//#include lib/matmul.wgsl

@group(0) @binding(2) var<storage, read> w: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col0 = gid.x * 4u;
    let row0 = gid.y * 4u;
    if (col0 >= p.n || row0 >= p.m) {
        return;
    }
    let blocks = p.k / 32u;
    let xs = tile_starts(row0, p.m, p.x_stride, p.x_offset);
    let ws = tile_starts(col0, p.n, blocks * Q8_0_WORDS, 0u);
    var acc = mat4x4<f32>();
    for (var kb = 0u; kb < blocks; kb = kb + 1u) {
        let at = ws + vec4<u32>(kb * Q8_0_WORDS);
        let d = vec4<f32>(
            f16_to_f32(w[at.x] & 0xffffu), f16_to_f32(w[at.y] & 0xffffu),
            f16_to_f32(w[at.z] & 0xffffu), f16_to_f32(w[at.w] & 0xffffu));
        let first = kb * 32u;
        for (var jw = 0u; jw < 8u; jw = jw + 1u) {
            let q = vec4<u32>(w[at.x + 1u + jw], w[at.y + 1u + jw], w[at.z + 1u + jw], w[at.w + 1u + jw]);
            for (var bb = 0u; bb < 4u; bb = bb + 1u) {
                let signed = bitcast<vec4<i32>>(q << vec4<u32>(24u - 8u * bb)) >> vec4<u32>(24u);
                let values = d * vec4<f32>(signed);
                let e = first + jw * 4u + bb;
                acc[0] = acc[0] + x[xs.x + e] * values;
                acc[1] = acc[1] + x[xs.y + e] * values;
                acc[2] = acc[2] + x[xs.z + e] * values;
                acc[3] = acc[3] + x[xs.w + e] * values;
            }
        }
    }
    store_tile(row0, col0, acc);
}
