// Matrix product with GGUF Q4_1 weights, dequantised as they are read: out[m, n] = sum over k
// of x[m, k] * dequant(w)[n, k]. Each row of w is k / 32 blocks of five words (lib/quant.wgsl);
// k is a multiple of 32. Row m of x starts at x_offset + m * x_stride; row m of out at
// out_offset + m * out_stride. Each invocation computes a 4 x 4 register tile, unpacking four
// weight rows' nibbles at a time, with no workgroup memory and no barriers (see matmul.wgsl).
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
    let ws = tile_starts(col0, p.n, blocks * Q4_1_WORDS, 0u);
    var acc = mat4x4<f32>();
    for (var kb = 0u; kb < blocks; kb = kb + 1u) {
        let at = ws + vec4<u32>(kb * Q4_1_WORDS);
        let scales = vec4<u32>(w[at.x], w[at.y], w[at.z], w[at.w]);
        let d = vec4<f32>(
            f16_to_f32(scales.x & 0xffffu), f16_to_f32(scales.y & 0xffffu),
            f16_to_f32(scales.z & 0xffffu), f16_to_f32(scales.w & 0xffffu));
        let mn = vec4<f32>(
            f16_to_f32(scales.x >> 16u), f16_to_f32(scales.y >> 16u),
            f16_to_f32(scales.z >> 16u), f16_to_f32(scales.w >> 16u));
        let first = kb * 32u;
        for (var jw = 0u; jw < 4u; jw = jw + 1u) {
            let q = vec4<u32>(w[at.x + 1u + jw], w[at.y + 1u + jw], w[at.z + 1u + jw], w[at.w + 1u + jw]);
            for (var bb = 0u; bb < 4u; bb = bb + 1u) {
                let bytes = (q >> vec4<u32>(8u * bb)) & vec4<u32>(0xffu);
                let lo = d * vec4<f32>(bytes & vec4<u32>(0xfu)) + mn;
                let hi = d * vec4<f32>(bytes >> vec4<u32>(4u)) + mn;
                let e = first + jw * 4u + bb;
                acc[0] = acc[0] + x[xs.x + e] * lo + x[xs.x + e + 16u] * hi;
                acc[1] = acc[1] + x[xs.y + e] * lo + x[xs.y + e + 16u] * hi;
                acc[2] = acc[2] + x[xs.z + e] * lo + x[xs.z + e + 16u] * hi;
                acc[3] = acc[3] + x[xs.w + e] * lo + x[xs.w + e + 16u] * hi;
            }
        }
    }
    store_tile(row0, col0, acc);
}
