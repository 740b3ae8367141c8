//! The unit tests' random numbers: xorshift64, the same sequence for the same seed everywhere.

/// A generator of u64 values from `seed` (not zero).
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
