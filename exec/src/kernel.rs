//! The kernel vocabulary shared by the CPU backend, the CUDA backend and the correctness checks:
//! the attention call's shape and layouts, the strided affine copy, the device interface the
//! checks drive, and the f64 reference attention. A leaf: it uses no other module of this crate.

use kvplan_vocab::schedule::HostMemory;

/// One attention call: `q_len` queries per sequence and query head against `kv_len` keys.
///
/// Layouts (row-major, token-major like the KV cache):
/// Q and O `[q_len][batch][q_heads][head_dim]`; K,V `[kv_len][2][batch][kv_heads][head_dim]`
/// (K at index 0, V at 1). Query head `h` reads key/value head `h / (q_heads / kv_heads)`.
/// With `causal`, query `i` sees keys `0..=kv_len - q_len + i`; a query that sees no key gets 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// Sequences.
    pub batch: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads (divides `q_heads`).
    pub kv_heads: usize,
    /// Queries per sequence.
    pub q_len: usize,
    /// Keys per sequence.
    pub kv_len: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Causal mask.
    pub causal: bool,
}

impl AttentionShape {
    /// Elements of Q (and of O).
    pub fn q_elems(&self) -> usize {
        self.q_len * self.batch * self.q_heads * self.head_dim
    }

    /// Elements of the K,V buffer.
    pub fn kv_elems(&self) -> usize {
        self.kv_len * 2 * self.batch * self.kv_heads * self.head_dim
    }

    /// Keys visible to query `qi`.
    pub fn visible(&self, qi: usize) -> usize {
        if self.causal {
            (self.kv_len as i64 - self.q_len as i64 + qi as i64 + 1).clamp(0, self.kv_len as i64)
                as usize
        } else {
            self.kv_len
        }
    }

    /// Elements between one token's keys and the next token's, for one (sequence, head).
    pub(crate) fn token_stride(&self) -> usize {
        2 * self.batch * self.kv_heads * self.head_dim
    }

    /// Offset of V from K within a token.
    pub(crate) fn v_offset(&self) -> usize {
        self.batch * self.kv_heads * self.head_dim
    }
}

/// A strided affine copy `dst[..] = src[..] * a + b` over `outer x middle x inner` elements (inner
/// contiguous). The elementwise op of a schedule is the contiguous case; KVPR's `kv_concat`
/// scatter is two 3-D cases with `a = 1, b = -0` (an exact copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Strided {
    pub outer: usize,
    pub middle: usize,
    pub inner: usize,
    pub src_at: usize,
    pub src_outer: usize,
    pub src_middle: usize,
    pub dst_at: usize,
    pub dst_outer: usize,
    pub dst_middle: usize,
}

impl Strided {
    /// `n` contiguous elements.
    pub fn contiguous(n: usize) -> Self {
        Strided {
            outer: 1,
            middle: 1,
            inner: n,
            src_at: 0,
            src_outer: 0,
            src_middle: 0,
            dst_at: 0,
            dst_outer: 0,
            dst_middle: 0,
        }
    }

    /// One past the last source and destination elements touched.
    pub fn extents(&self) -> (usize, usize) {
        if self.outer == 0 || self.middle == 0 || self.inner == 0 {
            return (0, 0);
        }
        let last = |at: usize, o: usize, m: usize| {
            at + (self.outer - 1) * o + (self.middle - 1) * m + self.inner
        };
        (
            last(self.src_at, self.src_outer, self.src_middle),
            last(self.dst_at, self.dst_outer, self.dst_middle),
        )
    }
}

/// Where a contiguous copy between host and device reads and writes: `len` elements from
/// `src_at` of the source to `dst_at` of the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopyAt {
    pub dst_at: usize,
    pub src_at: usize,
    pub len: usize,
}

impl CopyAt {
    /// The first `len` elements of the source to the start of the destination.
    pub fn first(len: usize) -> Self {
        CopyAt {
            dst_at: 0,
            src_at: 0,
            len,
        }
    }

    /// The destination's elements.
    pub fn dst(&self) -> std::ops::Range<usize> {
        self.dst_at..self.dst_at + self.len
    }

    /// The source's elements.
    pub fn src(&self) -> std::ops::Range<usize> {
        self.src_at..self.src_at + self.len
    }
}

/// What a backend offers the checks: host and device buffers of its element type, copies
/// between them, and its kernels. `Host` buffers are pinned where the backend has such a thing.
pub(crate) trait Device {
    /// Host buffer.
    type Host;
    /// Device buffer.
    type Dev;
    /// What a failed call returns (the crate's `Error` for both backends).
    type Error;

    /// The value the backend stores for `x`.
    fn round(&self, x: f32) -> f32;
    /// A host buffer holding `data`.
    fn host(&mut self, data: &[f32]) -> Result<Self::Host, Self::Error>;
    /// A zeroed host buffer.
    fn host_zeroed(&mut self, len: usize) -> Result<Self::Host, Self::Error>;
    /// A zeroed device buffer.
    fn dev_zeroed(&mut self, len: usize) -> Result<Self::Dev, Self::Error>;
    /// Copies `at` host→device.
    fn h2d(&mut self, dst: &mut Self::Dev, src: &Self::Host, at: CopyAt)
    -> Result<(), Self::Error>;
    /// Copies `at` device→host.
    fn d2h(&mut self, dst: &mut Self::Host, src: &Self::Dev, at: CopyAt)
    -> Result<(), Self::Error>;
    /// Row-major `c[m, n] = a[m, k] · b[k, n]`.
    fn gemm(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        a: &Self::Dev,
        b: &Self::Dev,
        c: &mut Self::Dev,
    ) -> Result<(), Self::Error>;
    /// `dst = src * a + b` over `s`.
    fn strided(
        &mut self,
        s: &Strided,
        src: &Self::Dev,
        dst: &mut Self::Dev,
        a: f32,
        b: f32,
    ) -> Result<(), Self::Error>;
    /// Attention of `shape`.
    fn attention(
        &mut self,
        shape: &AttentionShape,
        q: &Self::Dev,
        kv: &Self::Dev,
        out: &mut Self::Dev,
    ) -> Result<(), Self::Error>;
    /// Waits for the device and returns a host buffer's values.
    fn read(&mut self, h: &Self::Host) -> Result<Vec<f32>, Self::Error>;
}

/// Host memory the checks' `Host` buffers use (pinned; the CPU backend copies through the same
/// path as the executor's pinned copies).
pub(crate) const CHECK_HOST: HostMemory = HostMemory::Pinned;

/// Attention in f64 (same layouts and masking as the backends).
pub(crate) fn reference_attention(s: &AttentionShape, q: &[f32], kv: &[f32]) -> Vec<f32> {
    let d = s.head_dim;
    let group = s.q_heads / s.kv_heads;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0f32; s.q_elems()];
    let mut p = vec![0.0f64; s.kv_len];
    for qi in 0..s.q_len {
        let vis = s.visible(qi);
        for b in 0..s.batch {
            for h in 0..s.q_heads {
                let row = ((qi * s.batch + b) * s.q_heads + h) * d;
                if vis == 0 {
                    continue;
                }
                let base = (b * s.kv_heads + h / group) * d;
                let mut mx = f64::NEG_INFINITY;
                for (t, pt) in p.iter_mut().enumerate().take(vis) {
                    let k = &kv[t * s.token_stride() + base..][..d];
                    let dot: f64 = q[row..row + d]
                        .iter()
                        .zip(k)
                        .map(|(&a, &b)| f64::from(a) * f64::from(b))
                        .sum();
                    *pt = dot * scale;
                    mx = mx.max(*pt);
                }
                let mut sum = 0.0;
                for pt in p.iter_mut().take(vis) {
                    *pt = (*pt - mx).exp();
                    sum += *pt;
                }
                for e in 0..d {
                    let mut acc = 0.0;
                    for (t, pt) in p.iter().enumerate().take(vis) {
                        acc += pt * f64::from(kv[t * s.token_stride() + s.v_offset() + base + e]);
                    }
                    out[row + e] = (acc / sum) as f32;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_extents_cover_the_last_element() {
        let s = Strided {
            outer: 2,
            middle: 3,
            inner: 4,
            src_at: 1,
            src_outer: 30,
            src_middle: 8,
            dst_at: 0,
            dst_outer: 12,
            dst_middle: 4,
        };
        assert_eq!(s.extents(), (1 + 30 + 16 + 4, 12 + 8 + 4));
        assert_eq!(Strided::contiguous(0).extents(), (0, 0));
    }
}
