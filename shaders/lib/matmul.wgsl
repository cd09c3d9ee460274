// What the three matrix products share: their parameters, the activations and output bindings
// (each kernel declares its weights as binding 2, in its own format), and the index helpers of
// their 4 x 4 register tiles.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    x_stride: u32,
    x_offset: u32,
    out_stride: u32,
    out_offset: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// Where each of the four rows first, first + 1, ... starts, rows past `count` clamped to the
// last one (their results are computed but never stored).
fn tile_starts(first: u32, count: u32, stride: u32, offset: u32) -> vec4<u32> {
    let last = count - 1u;
    return vec4<u32>(
        offset + min(first, last) * stride,
        offset + min(first + 1u, last) * stride,
        offset + min(first + 2u, last) * stride,
        offset + min(first + 3u, last) * stride,
    );
}

// Writes the part of a 4 x 4 tile (rows of acc are rows of out) inside m x n.
fn store_tile(row0: u32, col0: u32, acc: mat4x4<f32>) {
    for (var i = 0u; i < 4u; i = i + 1u) {
        let row = row0 + i;
        if (row < p.m) {
            for (var j = 0u; j < 4u; j = j + 1u) {
                if (col0 + j < p.n) {
                    out[p.out_offset + row * p.out_stride + col0 + j] = acc[i][j];
                }
            }
        }
    }
}
