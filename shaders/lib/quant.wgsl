// Unpacking of GGUF blocks as the dequantising matrix products read them. A Q4_1 block is
// five words: the scale d and minimum m as two f16 halves of word 0, then 16 bytes whose low
// nibbles are elements 0..15 and high nibbles elements 16..31 (value = d * q + m). A Q8_0
// block is nine words as uploaded (the host pads GGUF's 34 bytes to 36): the f16 scale in the
// low half of word 0, then 32 signed bytes (value = d * q).

const Q4_1_WORDS: u32 = 5u;
const Q8_0_WORDS: u32 = 9u;

// The f16 in the low 16 bits of `bits` as an f32 (by hand: unpack2x16float needs a capability
// not every adapter has).
fn f16_to_f32(bits: u32) -> f32 {
    let sign = (bits & 0x8000u) << 16u;
    let exponent = (bits >> 10u) & 0x1fu;
    let mantissa = bits & 0x3ffu;
    if (exponent == 0u) {
        // Zero or subnormal: mantissa * 2^-24.
        let magnitude = f32(mantissa) * 5.9604645e-8;
        return select(magnitude, -magnitude, sign != 0u);
    }
    if (exponent == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (mantissa << 13u));
    }
    return bitcast<f32>(sign | ((exponent + 112u) << 23u) | (mantissa << 13u));
}
