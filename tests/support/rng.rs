//! The one random generator of the tests: splitmix64 (no `rand` dependency, the same stream
//! on every target, reproducible from a seed).

/// A splitmix64 generator. Any seed, zero included, gives a full-period stream.
pub struct Rng(pub u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// Uniform in [0, 1), on a grid of 2⁻²⁴.
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in (0, 1): [`Rng::unit`]'s grid shifted by half a step (never 0, for logs).
    pub fn unit_open(&mut self) -> f32 {
        ((self.next() >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }

    /// Uniform in [-1, 1), on a grid of 2⁻²³.
    pub fn uniform(&mut self) -> f32 {
        self.unit() * 2.0 - 1.0
    }

    /// Standard normal (Box-Muller from two [`Rng::unit_open`] draws).
    pub fn gauss(&mut self) -> f32 {
        let (u, v) = (self.unit_open(), self.unit_open());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }

    /// `n` values uniform in [-scale, scale).
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Deterministic bytes: `n` bytes of the stream seeded with `seed`.
pub fn pattern(n: usize, seed: u64) -> Vec<u8> {
    Rng(seed).bytes(n)
}
