//! `x * y + z` rounded once (a fused multiply-add), fast on every target.
//!
//! Natively `f32::mul_add` is one instruction inside the kernels compiled with FMA. wasm has
//! no fused multiply-add: `f32::mul_add` is a call to libm's `fmaf`, about 20 cycles, which was
//! 11% of Gemma 3's prefill in wasm (Q4_K's block sums) and most of `v_expf`. [`via_f64`] gives
//! the same bits inline in most cases and calls `fmaf` only in the rare others.

/// `x * y + z` with one rounding: `f32::mul_add` natively, [`via_f64`] on wasm.
#[inline(always)]
pub fn mul_add(x: f32, y: f32, z: f32) -> f32 {
    #[cfg(target_arch = "wasm32")]
    {
        via_f64(x, y, z)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        x.mul_add(y, z)
    }
}

/// `x * y + z` with one rounding, through f64: the product of two f32 values is exact in f64
/// (48 significant bits), so the f64 sum `r` is the exact result rounded once. Rounding `r` to
/// f32 gives the exact result's f32 rounding unless `r` lies exactly halfway between two f32
/// values (low 29 bits 1 then 28 zeros: the exact result may be on either side), or is below
/// f32's normal range (where f32 rounds at a higher bit). Those cases take `f32::mul_add`.
#[cfg(any(target_arch = "wasm32", test))]
#[inline(always)]
pub fn via_f64(x: f32, y: f32, z: f32) -> f32 {
    let r = x as f64 * y as f64 + z as f64;
    let b = r.to_bits();
    let exp = (b >> 52) & 0x7ff;
    if b & 0x1fff_ffff != 0x1000_0000 && exp >= 1023 - 126 {
        return r as f32;
    }
    x.mul_add(y, z)
}

#[cfg(test)]
mod tests {
    use super::via_f64;
    use crate::test_rng::xorshift;

    fn check(x: f32, y: f32, z: f32) {
        let (got, want) = (via_f64(x, y, z), x.mul_add(y, z));
        let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
        assert!(same, "fma({x:e}, {y:e}, {z:e}) = {want:e}, via f64 {got:e}");
    }

    #[test]
    fn via_f64_matches_the_fused_multiply_add() {
        let mut next = xorshift(0x05ee_df4a);
        for _ in 0..2_000_000 {
            // Any bits (NaN, Inf, subnormals included) and values of like magnitude that cancel.
            let (x, y) = (f32::from_bits(next() as u32), f32::from_bits(next() as u32));
            check(x, y, f32::from_bits(next() as u32));
            let p = x * y;
            check(x, y, -p);
            check(x, y, f32::from_bits((-p).to_bits() ^ (next() as u32 & 0xff)));
        }
        // Ties of the f64 sum: the product's last bits decide the direction of the rounding.
        for k in 0..100_000u32 {
            let x = 1.0 + (k as f32) * f32::EPSILON;
            let y = 1.0 + f32::EPSILON / 2.0 + (k % 7) as f32 * f32::EPSILON;
            check(x, y, 1.0);
            check(x, y, -1.0);
            check(x, -y, 1.0 + f32::EPSILON);
        }
        // A subnormal result: the f64 sum z + 2^-150 is a tie at f32's last subnormal bit (low
        // 29 bits zero, so not caught as one) that rounds up to even, where the exact sum,
        // 2^-196 below it, rounds down.
        let p = |e: i32| 2f32.powi(e);
        check(p(-75) * (1.0 + p(-23)), p(-75) * (1.0 - p(-23)), p(-130) + p(-149));
        // Results in and near f32's subnormal range, zeros, the largest values.
        for (x, y, z) in [
            (1e-20f32, 1e-19, 1e-45),
            (1.5e-20, 1e-18, -1e-38),
            (f32::MIN_POSITIVE, 0.5, f32::MIN_POSITIVE / 4.0),
            (0.0, -1.0, 0.0),
            (-0.0, 1.0, -0.0),
            (f32::MAX, 2.0, -f32::MAX),
            (f32::MAX, 1.0, f32::MAX),
            (f32::INFINITY, 0.0, 1.0),
        ] {
            check(x, y, z);
        }
    }
}
