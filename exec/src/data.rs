//! Seeded synthetic data: a counter-based generator (SplitMix64's finaliser over `seed + i`), so
//! element `i` of a buffer is the same on the CPU and in the CUDA fill kernel
//! (`kernels.cu: kv_unit` computes the identical value), whatever the buffer's length.

/// SplitMix64's output function.
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Random bits of element `i` of the stream `seed`.
#[inline]
pub(crate) fn bits(seed: u64, i: u64) -> u64 {
    mix(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// Element `i` of the stream `seed`, uniform in `[-1, 1)` with 24 random bits (exact in f32, never
/// denormal except for exact zero).
#[inline]
pub(crate) fn unit(seed: u64, i: u64) -> f32 {
    (bits(seed, i) >> 40) as f32 * (1.0 / 8_388_608.0) - 1.0
}

/// A sub-seed for role `tag` of `seed`, so buffers of one run get independent streams.
pub(crate) fn derive(seed: u64, tag: u64) -> u64 {
    mix(seed ^ mix(tag.wrapping_add(GOLDEN)))
}

/// Fills `buf` with `unit(seed, i) * scale`.
pub(crate) fn fill_f32(buf: &mut [f32], seed: u64, scale: f32) {
    for (i, x) in buf.iter_mut().enumerate() {
        *x = unit(seed, i as u64) * scale;
    }
}

/// `len` values `unit(seed, i) * scale`.
pub(crate) fn random_f32(len: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut v = vec![0.0; len];
    fill_f32(&mut v, seed, scale);
    v
}

/// Elements generated before [`fill_f32_tiled`] repeats them.
const TILE: usize = 1 << 16;

/// Fills a (possibly huge) scratch buffer: the first 64 Ki elements are `unit(seed, i) * scale`,
/// the rest repeat them (memcpy, fast in any build). Timing needs valid values at every address,
/// not unique ones.
pub(crate) fn fill_f32_tiled(buf: &mut [f32], seed: u64, scale: f32) {
    let head = buf.len().min(TILE);
    fill_f32(&mut buf[..head], seed, scale);
    let mut done = head;
    while done < buf.len() {
        let n = done.min(buf.len() - done);
        buf.copy_within(..n, done);
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_values_are_in_range_and_seeded() {
        let a = random_f32(1000, 7, 1.0);
        assert!(a.iter().all(|x| (-1.0..1.0).contains(x)));
        assert_eq!(a, random_f32(1000, 7, 1.0));
        assert_ne!(a, random_f32(1000, 8, 1.0));
        let mean = a.iter().sum::<f32>() / 1000.0;
        assert!(mean.abs() < 0.1, "{mean}");
    }

    #[test]
    fn tiled_fill_repeats_the_first_tile() {
        let mut v = vec![0.0f32; 3 * TILE + 5];
        fill_f32_tiled(&mut v, 9, 0.5);
        assert_eq!(&v[..TILE], &random_f32(TILE, 9, 0.5)[..]);
        assert_eq!(v[2 * TILE + 3], v[3]);
        assert_eq!(v[3 * TILE + 4], v[4]);
        let mut short = vec![0.0f32; 10];
        fill_f32_tiled(&mut short, 9, 0.5);
        assert_eq!(short, random_f32(10, 9, 0.5));
    }
}
