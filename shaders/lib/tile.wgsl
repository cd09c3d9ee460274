// Index helpers of the matrix products' 4 x 4 register tiles.

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
