// The counter-based random numbers of token sampling: a uniform draw in [0, 1) from
// (seed, row, step), the same on every GPU and in the CPU reference (`reference::uniform`).

// One round of the PCG output hash (O'Neill's RXS-M-XS on 32 bits).
fn pcg_hash(input: u32) -> u32 {
    let state = input * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// A uniform draw in [0, 1) with 24 random bits.
fn uniform01(seed_lo: u32, seed_hi: u32, row: u32, step: u32) -> f32 {
    var h = pcg_hash(seed_lo ^ pcg_hash(seed_hi));
    h = pcg_hash(h ^ pcg_hash(row + 0x9e3779b9u));
    h = pcg_hash(h ^ pcg_hash(step + 0x7f4a7c15u));
    return f32(h >> 8u) * (1.0 / 16777216.0);
}
