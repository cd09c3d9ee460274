//! Python's `random.Random` (the Mersenne Twister MT19937 with CPython's seeding and
//! derivations), so BFCL backends that draw from a seeded generator give the same numbers
//! here as in Python: `random()`, `getrandbits`, `randint` and `uniform`.
//!
//! CPython seeds from an integer by splitting its absolute value into 32-bit words (least
//! significant first) and calling MT19937's `init_by_array` with them; `random()` joins 27 and
//! 26 bits of two outputs into a double; `randint(a, b)` is `a + randbelow(b - a + 1)`, which
//! draws `bit_length` bits until the value falls below the bound.

const N: usize = 624;
const M: usize = 397;

/// A generator seeded as `random.Random(seed)` seeds it.
#[derive(Clone, Debug)]
pub struct PyRandom {
    state: [u32; N],
    index: usize,
}

impl PyRandom {
    /// `random.Random(seed)` for an integer seed.
    pub fn new(seed: i128) -> PyRandom {
        let mut magnitude = seed.unsigned_abs();
        let mut key = Vec::new();
        while magnitude > 0 {
            key.push(magnitude as u32);
            magnitude >>= 32;
        }
        if key.is_empty() {
            key.push(0);
        }
        let mut rng = PyRandom {
            state: [0; N],
            index: N,
        };
        rng.init_by_array(&key);
        rng
    }

    fn init_genrand(&mut self, seed: u32) {
        self.state[0] = seed;
        for i in 1..N {
            let prev = self.state[i - 1];
            self.state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        self.index = N;
    }

    fn init_by_array(&mut self, key: &[u32]) {
        self.init_genrand(19_650_218);
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = self.state[i - 1];
            self.state[i] = (self.state[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                self.state[0] = self.state[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = self.state[i - 1];
            self.state[i] = (self.state[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941))
                .wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                self.state[0] = self.state[N - 1];
                i = 1;
            }
        }
        self.state[0] = 0x8000_0000;
        self.index = N;
    }

    fn twist(&mut self) {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        for k in 0..N {
            let y = (self.state[k] & UPPER) | (self.state[(k + 1) % N] & LOWER);
            let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
            self.state[k] = self.state[(k + M) % N] ^ (y >> 1) ^ mag;
        }
        self.index = 0;
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// `random()`: a float in [0, 1) with 53 random bits.
    pub fn random(&mut self) -> f64 {
        let a = f64::from(self.next_u32() >> 5);
        let b = f64::from(self.next_u32() >> 6);
        (a * 67_108_864.0 + b) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `getrandbits(k)` for `k` up to 128.
    pub fn getrandbits(&mut self, k: u32) -> u128 {
        assert!(k <= 128, "getrandbits supports up to 128 bits here");
        if k == 0 {
            return 0;
        }
        if k <= 32 {
            return u128::from(self.next_u32() >> (32 - k));
        }
        // Words least significant first; the last one keeps its top bits.
        let mut out = 0u128;
        let mut left = k;
        let mut shift = 0;
        while left > 0 {
            let mut word = self.next_u32();
            if left < 32 {
                word >>= 32 - left;
            }
            out |= u128::from(word) << shift;
            shift += 32;
            left = left.saturating_sub(32);
        }
        out
    }

    /// `_randbelow(n)` for `n > 0`.
    fn randbelow(&mut self, n: u128) -> u128 {
        let k = 128 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `randint(a, b)`: an integer in [a, b], both ends included.
    pub fn randint(&mut self, a: i64, b: i64) -> i64 {
        assert!(a <= b, "randint needs a <= b");
        let span = (i128::from(b) - i128::from(a) + 1) as u128;
        (i128::from(a) + self.randbelow(span) as i128) as i64
    }

    /// `uniform(a, b)`: `a + (b - a) * random()`.
    pub fn uniform(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.random()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Values printed by CPython 3 for the same seeds and calls (random.Random(seed)).
    #[test]
    fn draws_match_cpython() {
        let mut r = PyRandom::new(200_191);
        let ints: Vec<i64> = (0..3).map(|_| r.randint(10_000, 99_999)).collect();
        assert_eq!(ints, [67_410, 41_772, 24_547]);

        let mut r = PyRandom::new(141_053);
        assert_eq!(r.uniform(-10.0, 40.0), 36.634_857_037_905_35);
        assert_eq!(r.uniform(-10.0, 40.0), 31.299_689_286_997_52);
        assert_eq!(r.randint(100_000_000_000, 999_999_999_999), 307_751_534_385);
        assert_eq!(r.random(), 0.343_630_288_856_393_9);

        let mut r = PyRandom::new(1_053_520);
        assert_eq!(r.randint(0, 1 << 31), 229_209_566);
        assert_eq!(r.getrandbits(70), 751_439_038_950_517_900_677);

        assert_eq!(PyRandom::new(0).random(), 0.844_421_851_525_048_1);
        assert_eq!(
            PyRandom::new((1 << 40) + 5).random(),
            0.504_380_297_041_844_3
        );
    }
}
