// kvplan-exec's CUDA kernels, compiled at run time with NVRTC for the device's architecture.
// No headers: fp16 conversions use PTX `cvt`, bf16 ones bit operations, so the source compiles
// whatever headers the NVRTC installation ships.
//
// Layouts (row-major, token-major like the offloaded KV cache):
//   Q, O : [q_len][batch][q_heads][head_dim]
//   K, V : [kv_len][2][batch][kv_heads][head_dim]   (K at index 0, V at 1)
// Query head h reads key/value head h / (q_heads / kv_heads). With `causal`, query i sees keys
// 0 ..= kv_len - q_len + i; a query that sees no key writes 0.

typedef unsigned short kv_u16;
typedef unsigned long long kv_u64;

struct alignas(16) kv_vec16 {
    unsigned int x, y, z, w;
};

#define KV_NEG_INF (__int_as_float(0xff800000))
#define KV_FULL_MASK 0xffffffffu

struct F16 {
    typedef kv_u16 T;
    static __device__ __forceinline__ float load(T v) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
        return f;
    }
    static __device__ __forceinline__ T store(float f) {
        T h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
};

struct BF16 {
    typedef kv_u16 T;
    static __device__ __forceinline__ float load(T v) {
        return __uint_as_float(((unsigned int)v) << 16);
    }
    static __device__ __forceinline__ T store(float f) {
        unsigned int u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            return (T)((u >> 16) | 0x40u);  // quiet NaN
        }
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
        return (T)(u >> 16);
    }
};

struct F32 {
    typedef float T;
    static __device__ __forceinline__ float load(T v) { return v; }
    static __device__ __forceinline__ T store(float f) { return f; }
};

// ---------------------------------------------------------------------------------------------
// Synthetic data: element i of stream `seed`, uniform in [-1, 1) (same as the CPU's data::unit).

__device__ __forceinline__ kv_u64 kv_mix(kv_u64 x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ float kv_unit(kv_u64 seed, kv_u64 i) {
    const kv_u64 r = kv_mix(seed + (i + 1ull) * 0x9E3779B97F4A7C15ull);
    return (float)(r >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

template <class E>
__device__ __forceinline__ void fill_impl(typename E::T* p, kv_u64 n, kv_u64 seed, float scale) {
    const kv_u64 stride = (kv_u64)gridDim.x * blockDim.x;
    for (kv_u64 i = (kv_u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        p[i] = E::store(kv_unit(seed, i) * scale);
    }
}

// ---------------------------------------------------------------------------------------------
// dst = src * a + c over outer x middle x inner elements (inner contiguous). The contiguous case
// (outer = middle = 1) moves 16 bytes per thread per step when both pointers are 16-aligned.

template <class E>
__device__ __forceinline__ void axpb_impl(const typename E::T* __restrict__ src,
                                          typename E::T* __restrict__ dst, kv_u64 outer,
                                          kv_u64 middle, kv_u64 inner, kv_u64 s_outer,
                                          kv_u64 s_middle, kv_u64 d_outer, kv_u64 d_middle,
                                          float a, float c) {
    typedef typename E::T T;
    const kv_u64 tid = (kv_u64)blockIdx.x * blockDim.x + threadIdx.x;
    const kv_u64 nthreads = (kv_u64)gridDim.x * blockDim.x;
    if (outer == 1 && middle == 1) {
        const int PER = (int)(sizeof(kv_vec16) / sizeof(T));
        const bool aligned = ((((kv_u64)src) | ((kv_u64)dst)) & 15ull) == 0;
        const kv_u64 nvec = aligned ? inner / PER : 0;
        const kv_vec16* s4 = reinterpret_cast<const kv_vec16*>(src);
        kv_vec16* d4 = reinterpret_cast<kv_vec16*>(dst);
        for (kv_u64 v = tid; v < nvec; v += nthreads) {
            kv_vec16 x = s4[v];
            T* xe = reinterpret_cast<T*>(&x);
#pragma unroll
            for (int k = 0; k < PER; ++k) {
                xe[k] = E::store(E::load(xe[k]) * a + c);
            }
            d4[v] = x;
        }
        for (kv_u64 i = nvec * PER + tid; i < inner; i += nthreads) {
            dst[i] = E::store(E::load(src[i]) * a + c);
        }
        return;
    }
    const kv_u64 total = outer * middle * inner;
    for (kv_u64 i = tid; i < total; i += nthreads) {
        const kv_u64 e = i % inner;
        const kv_u64 r = i / inner;
        const kv_u64 m = r % middle;
        const kv_u64 o = r / middle;
        dst[o * d_outer + m * d_middle + e] =
            E::store(E::load(src[o * s_outer + m * s_middle + e]) * a + c);
    }
}

// ---------------------------------------------------------------------------------------------
// Attention for few queries per sequence (decode): one block of 4 warps per (query row, query
// head, key split). Each warp takes every 4th key of the split; lanes split the head dimension
// (element e = lane + 32 j, j < MAXE), a warp reduction gives the score, and an online softmax
// accumulates in fp32. The block merges its warps; with several splits the partial
// (max, sum, acc[D]) goes to `ws` and attn_combine merges the splits.
//   grid = (q_len * batch, q_heads, splits), block = 128.

#define KV_NWARPS 4

template <class E, int MAXE>
__device__ __forceinline__ void attn_decode_impl(const typename E::T* __restrict__ q,
                                                 const typename E::T* __restrict__ kv,
                                                 typename E::T* __restrict__ out,
                                                 float* __restrict__ ws, int B, int Hq, int Hkv,
                                                 int Lq, int Lkv, int D, int causal, int splits,
                                                 int chunk, float scale) {
    typedef typename E::T T;
    __shared__ float sm_m[KV_NWARPS];
    __shared__ float sm_l[KV_NWARPS];
    __shared__ float sm_acc[KV_NWARPS][MAXE * 32];
    const int row = blockIdx.x;  // qi * B + b
    const int h = blockIdx.y;
    const int split = blockIdx.z;
    const int b = row % B;
    const int qi = row / B;
    const int hk = h / (Hq / Hkv);
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    long long visible = Lkv;
    if (causal) {
        visible = (long long)Lkv - Lq + qi + 1;
        if (visible < 0) visible = 0;
        if (visible > Lkv) visible = Lkv;
    }
    const long long t0 = (long long)split * chunk;
    long long t1 = t0 + chunk;
    if (t1 > visible) t1 = visible;
    const long long orow = (long long)row * Hq + h;
    float qr[MAXE];
    float acc[MAXE];
#pragma unroll
    for (int j = 0; j < MAXE; ++j) {
        const int e = lane + 32 * j;
        qr[j] = e < D ? E::load(q[orow * D + e]) * scale : 0.0f;
        acc[j] = 0.0f;
    }
    float m = KV_NEG_INF;
    float l = 0.0f;
    const long long tstride = 2LL * B * Hkv * D;
    const long long voff = (long long)B * Hkv * D;
    const T* kbase = kv + ((long long)b * Hkv + hk) * D;
    for (long long t = t0 + warp; t < t1; t += KV_NWARPS) {
        const T* kp = kbase + t * tstride;
        const T* vp = kp + voff;
        float s = 0.0f;
        float vv[MAXE];
#pragma unroll
        for (int j = 0; j < MAXE; ++j) {
            const int e = lane + 32 * j;
            if (e < D) {
                s += qr[j] * E::load(kp[e]);
                vv[j] = E::load(vp[e]);
            } else {
                vv[j] = 0.0f;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            s += __shfl_xor_sync(KV_FULL_MASK, s, o);
        }
        const float mn = fmaxf(m, s);
        const float c = __expf(m - mn);
        const float p = __expf(s - mn);
        l = l * c + p;
#pragma unroll
        for (int j = 0; j < MAXE; ++j) {
            acc[j] = acc[j] * c + p * vv[j];
        }
        m = mn;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < MAXE; ++j) {
        sm_acc[warp][lane + 32 * j] = acc[j];
    }
    __syncthreads();
    float M = KV_NEG_INF;
#pragma unroll
    for (int w = 0; w < KV_NWARPS; ++w) M = fmaxf(M, sm_m[w]);
    float f[KV_NWARPS];
    float L = 0.0f;
#pragma unroll
    for (int w = 0; w < KV_NWARPS; ++w) {
        f[w] = M == KV_NEG_INF ? 0.0f : __expf(sm_m[w] - M);
        L += sm_l[w] * f[w];
    }
    for (int e = threadIdx.x; e < D; e += blockDim.x) {
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < KV_NWARPS; ++w) v += sm_acc[w][e] * f[w];
        if (splits == 1) {
            out[orow * D + e] = E::store(L > 0.0f ? v / L : 0.0f);
        } else {
            float* p = ws + (orow * splits + split) * (long long)(D + 2);
            p[2 + e] = v;
            if (e == 0) {
                p[0] = M;
                p[1] = L;
            }
        }
    }
}

// Merges the splits of attn_decode: grid = (q_len * batch, q_heads), block = 128.
template <class E>
__device__ __forceinline__ void attn_combine_impl(const float* __restrict__ ws,
                                                  typename E::T* __restrict__ out, int Hq, int D,
                                                  int splits) {
    const long long orow = (long long)blockIdx.x * Hq + blockIdx.y;
    const float* p = ws + orow * splits * (long long)(D + 2);
    const long long st = D + 2;
    float M = KV_NEG_INF;
    for (int s = 0; s < splits; ++s) M = fmaxf(M, p[s * st]);
    float L = 0.0f;
    for (int s = 0; s < splits; ++s) {
        L += M == KV_NEG_INF ? 0.0f : p[s * st + 1] * __expf(p[s * st] - M);
    }
    for (int e = threadIdx.x; e < D; e += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < splits; ++s) {
            v += M == KV_NEG_INF ? 0.0f : p[s * st + 2 + e] * __expf(p[s * st] - M);
        }
        out[orow * D + e] = E::store(L > 0.0f ? v / L : 0.0f);
    }
}

// ---------------------------------------------------------------------------------------------
// Attention for many queries (prefill): one block of 4 warps per (16-query tile, sequence,
// query head). K and V tiles of 32 keys are staged in shared memory as fp32 (K rows padded to
// D + 1 floats: conflict-free column reads); Q rows are staged once. Each warp owns 4 queries:
// lane t scores key t of the tile over the full head dimension, a warp max/sum gives the tile's
// online-softmax update, and P·V accumulates with lanes splitting the head dimension.
//   grid = (batch * ceil(q_len / 16), q_heads), block = 128,
//   dynamic shared memory = (32 * (D + 1) + 32 * D + 16 * D) * 4 bytes.

#define KV_BQ 16
#define KV_BK 32
#define KV_QPW (KV_BQ / KV_NWARPS)

template <class E, int MAXE>
__device__ __forceinline__ void attn_prefill_impl(const typename E::T* __restrict__ q,
                                                  const typename E::T* __restrict__ kv,
                                                  typename E::T* __restrict__ out, int B, int Hq,
                                                  int Hkv, int Lq, int Lkv, int D, int causal,
                                                  float scale) {
    typedef typename E::T T;
    extern __shared__ float kv_smem[];
    float* Ks = kv_smem;               // [BK][D + 1]
    float* Vs = Ks + KV_BK * (D + 1);  // [BK][D]
    float* Qs = Vs + KV_BK * D;        // [BQ][D]
    const int qtiles = (Lq + KV_BQ - 1) / KV_BQ;
    const int b = blockIdx.x / qtiles;
    const int q0 = (blockIdx.x % qtiles) * KV_BQ;
    const int h = blockIdx.y;
    const int hk = h / (Hq / Hkv);
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < KV_BQ * D; i += blockDim.x) {
        const int r = i / D;
        const int e = i - r * D;
        const int qi = q0 + r;
        Qs[i] = qi < Lq ? E::load(q[(((long long)qi * B + b) * Hq + h) * D + e]) * scale : 0.0f;
    }
    // Keys any query of this tile can see.
    long long kend = Lkv;
    if (causal) {
        long long last = q0 + KV_BQ - 1;
        if (last > Lq - 1) last = Lq - 1;
        kend = (long long)Lkv - Lq + last + 1;
        if (kend < 0) kend = 0;
        if (kend > Lkv) kend = Lkv;
    }
    float m[KV_QPW];
    float l[KV_QPW];
    float acc[KV_QPW][MAXE];
#pragma unroll
    for (int r = 0; r < KV_QPW; ++r) {
        m[r] = KV_NEG_INF;
        l[r] = 0.0f;
#pragma unroll
        for (int j = 0; j < MAXE; ++j) acc[r][j] = 0.0f;
    }
    const long long tstride = 2LL * B * Hkv * D;
    const long long voff = (long long)B * Hkv * D;
    const T* kbase = kv + ((long long)b * Hkv + hk) * D;
    for (long long kt = 0; kt < kend; kt += KV_BK) {
        __syncthreads();  // the previous tile has been consumed (and Qs is complete)
        for (int i = threadIdx.x; i < KV_BK * D; i += blockDim.x) {
            const int t = i / D;
            const int e = i - t * D;
            const long long key = kt + t;
            float kval = 0.0f;
            float vval = 0.0f;
            if (key < kend) {
                const T* kp = kbase + key * tstride;
                kval = E::load(kp[e]);
                vval = E::load(kp[voff + e]);
            }
            Ks[t * (D + 1) + e] = kval;
            Vs[t * D + e] = vval;
        }
        __syncthreads();
        const long long rem = kend - kt;
        const int tmax = rem < KV_BK ? (int)rem : KV_BK;
#pragma unroll
        for (int r = 0; r < KV_QPW; ++r) {
            const int qr = warp * KV_QPW + r;
            const int qi = q0 + qr;
            if (qi >= Lq) continue;  // uniform across the warp
            const long long limit = causal ? (long long)Lkv - Lq + qi : (long long)Lkv - 1;
            const long long key = kt + lane;
            float s = KV_NEG_INF;
            if (lane < tmax && key <= limit) {
                const float* qs = Qs + qr * D;
                const float* ks = Ks + lane * (D + 1);
                float a = 0.0f;
                for (int e = 0; e < D; ++e) a += qs[e] * ks[e];
                s = a;
            }
            float mt = s;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(KV_FULL_MASK, mt, o));
            if (mt == KV_NEG_INF) continue;  // no visible key in this tile; uniform
            const float mn = fmaxf(m[r], mt);
            const float c = __expf(m[r] - mn);
            const float p = s == KV_NEG_INF ? 0.0f : __expf(s - mn);
            float ps = p;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(KV_FULL_MASK, ps, o);
            l[r] = l[r] * c + ps;
#pragma unroll
            for (int j = 0; j < MAXE; ++j) acc[r][j] *= c;
            for (int t = 0; t < tmax; ++t) {
                const float pt = __shfl_sync(KV_FULL_MASK, p, t);
                const float* vs = Vs + t * D;
#pragma unroll
                for (int j = 0; j < MAXE; ++j) {
                    const int e = lane + 32 * j;
                    if (e < D) acc[r][j] += pt * vs[e];
                }
            }
            m[r] = mn;
        }
    }
#pragma unroll
    for (int r = 0; r < KV_QPW; ++r) {
        const int qi = q0 + warp * KV_QPW + r;
        if (qi >= Lq) continue;
        const long long orow = ((long long)qi * B + b) * Hq + h;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
        for (int j = 0; j < MAXE; ++j) {
            const int e = lane + 32 * j;
            if (e < D) out[orow * D + e] = E::store(acc[r][j] * inv);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Spins one thread for `ns` nanoseconds of the GPU's global timer: gives the host a head start
// to queue a run's ops before the reference event is recorded.

extern "C" __global__ void kv_spin(kv_u64 ns) {
    kv_u64 start;
    kv_u64 now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

// ---------------------------------------------------------------------------------------------
// Entry points: <kernel>_<dtype>[_e<MAXE>], dtype in {f16, bf16, f32}; MAXE = ceil(D / 32) bound
// (e2: D <= 64, e4: D <= 128, e8: D <= 256).

#define KV_DECODE(NAME, E, MAXE)                                                                 \
    extern "C" __global__ void attn_decode_##NAME##_e##MAXE(                                    \
        const E::T* q, const E::T* kv, E::T* out, float* ws, int B, int Hq, int Hkv, int Lq,     \
        int Lkv, int D, int causal, int splits, int chunk, float scale) {                        \
        attn_decode_impl<E, MAXE>(q, kv, out, ws, B, Hq, Hkv, Lq, Lkv, D, causal, splits, chunk, \
                                  scale);                                                        \
    }

#define KV_PREFILL(NAME, E, MAXE)                                                                \
    extern "C" __global__ void attn_prefill_##NAME##_e##MAXE(const E::T* q, const E::T* kv,     \
                                                             E::T* out, int B, int Hq, int Hkv,  \
                                                             int Lq, int Lkv, int D, int causal, \
                                                             float scale) {                      \
        attn_prefill_impl<E, MAXE>(q, kv, out, B, Hq, Hkv, Lq, Lkv, D, causal, scale);           \
    }

#define KV_DTYPE(NAME, E)                                                                        \
    extern "C" __global__ void fill_##NAME(E::T* p, kv_u64 n, kv_u64 seed, float scale) {        \
        fill_impl<E>(p, n, seed, scale);                                                         \
    }                                                                                            \
    extern "C" __global__ void axpb_##NAME(const E::T* src, E::T* dst, kv_u64 outer,            \
                                           kv_u64 middle, kv_u64 inner, kv_u64 s_outer,          \
                                           kv_u64 s_middle, kv_u64 d_outer, kv_u64 d_middle,     \
                                           float a, float c) {                                   \
        axpb_impl<E>(src, dst, outer, middle, inner, s_outer, s_middle, d_outer, d_middle, a, c); \
    }                                                                                            \
    extern "C" __global__ void attn_combine_##NAME(const float* ws, E::T* out, int Hq, int D,    \
                                                   int splits) {                                 \
        attn_combine_impl<E>(ws, out, Hq, D, splits);                                            \
    }                                                                                            \
    KV_DECODE(NAME, E, 2)                                                                        \
    KV_DECODE(NAME, E, 4)                                                                        \
    KV_DECODE(NAME, E, 8)                                                                        \
    KV_PREFILL(NAME, E, 2)                                                                       \
    KV_PREFILL(NAME, E, 4)                                                                       \
    KV_PREFILL(NAME, E, 8)

KV_DTYPE(f16, F16)
KV_DTYPE(bf16, BF16)
KV_DTYPE(f32, F32)
