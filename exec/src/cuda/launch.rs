//! The kernels: NVRTC compilation of `kernels.cu`, loading, and the launches (and the cuBLAS
//! GEMM) shared by the executor and the checks.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::{CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg, sys};
use cudarc::nvrtc::{self, Ptx};
use kvplan_vocab::DType;

use super::driver::{OrCuda, internal};
use crate::error::Error;
use crate::kernel::{AttentionShape, Strided};

/// The kernels' CUDA C source.
const SOURCE: &str = include_str!("kernels.cu");

/// Queries per sequence from which attention uses the tiled prefill kernel.
const PREFILL_MIN_Q: usize = 8;

/// Kernel name suffix of an element type.
const fn dt_name(d: DType) -> &'static str {
    match d {
        DType::Fp16 => "f16",
        DType::Bf16 => "bf16",
        DType::Fp32 => "f32",
    }
}

/// Attention kernel variants: the largest head dimension each handles.
const VARIANTS: [(usize, &str); 3] = [(64, "e2"), (128, "e4"), (256, "e8")];

/// Compiles the kernels for compute capability `cc`: a cubin for `sm_XY` (no driver JIT, so a
/// newer NVRTC than the driver is fine), else PTX for `compute_XY`.
pub(super) fn compile(cc: (i32, i32)) -> Result<Ptx, Error> {
    let sm = format!("-arch=sm_{}{}", cc.0, cc.1);
    let cubin_err = match nvrtc_compile(&sm, true) {
        Ok(bin) => return Ok(Ptx::from_binary(bin)),
        Err(e) => e,
    };
    let compute = format!("-arch=compute_{}{}", cc.0, cc.1);
    match nvrtc_compile(&compute, false) {
        Ok(ptx) => Ok(Ptx::from_src(String::from_utf8_lossy(&ptx).into_owned())),
        Err(ptx_err) => Err(Error::Cuda {
            context: format!(
                "compiling the kernels with NVRTC for compute capability {}.{}",
                cc.0, cc.1
            ),
            message: format!("as a cubin: {cubin_err}; as PTX: {ptx_err}"),
        }),
    }
}

struct Program(nvrtc::sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed only here.
        let _ = unsafe { nvrtc::result::destroy_program(self.0) };
    }
}

/// Compiles [`SOURCE`]; returns the cubin or the PTX text (without its NUL).
fn nvrtc_compile(arch: &str, cubin: bool) -> Result<Vec<u8>, String> {
    let src = std::ffi::CString::new(SOURCE).map_err(|e| e.to_string())?;
    let prog = Program(
        nvrtc::result::create_program(&src, Some(c"kvplan_kernels.cu"))
            .map_err(|e| format!("nvrtcCreateProgram: {e}"))?,
    );
    let options = [arch.to_string(), "-std=c++17".to_string()];
    // SAFETY: `prog` is a live program (destroyed only when `prog` drops); `src` outlives it.
    if let Err(e) = unsafe { nvrtc::result::compile_program(prog.0, &options) } {
        // SAFETY: as above.
        let log = unsafe { nvrtc::result::get_program_log(prog.0) }
            .map(|l| {
                let bytes: Vec<u8> = l
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        return Err(format!("{e} ({}): {log}", options.join(" ")));
    }
    if cubin {
        let mut size = 0usize;
        // SAFETY: the program compiled; nvrtcGetCUBINSize writes one usize.
        unsafe { nvrtc::sys::nvrtcGetCUBINSize(prog.0, &mut size) }
            .result()
            .map_err(|e| format!("nvrtcGetCUBINSize: {e}"))?;
        if size == 0 {
            return Err("NVRTC produced no cubin".into());
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` has the `size` bytes nvrtcGetCUBIN writes.
        unsafe { nvrtc::sys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr().cast()) }
            .result()
            .map_err(|e| format!("nvrtcGetCUBIN: {e}"))?;
        Ok(buf)
    } else {
        // SAFETY: the program compiled.
        let ptx =
            unsafe { nvrtc::result::get_ptx(prog.0) }.map_err(|e| format!("nvrtcGetPTX: {e}"))?;
        Ok(ptx
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect())
    }
}

/// Dynamic shared memory of the prefill kernel for head dimension `d`.
pub(super) fn prefill_smem(d: usize) -> usize {
    (32 * (d + 1) + 32 * d + 16 * d) * 4
}

/// The loaded kernels of one device.
pub(super) struct Kernels {
    /// `[dtype][variant]`, dtype by [`DType::index`].
    pub(super) decode: [[CudaFunction; 3]; DType::COUNT],
    pub(super) prefill: [[CudaFunction; 3]; DType::COUNT],
    pub(super) combine: [CudaFunction; DType::COUNT],
    pub(super) axpb: [CudaFunction; DType::COUNT],
    pub(super) fill: [CudaFunction; DType::COUNT],
    pub(super) spin: CudaFunction,
    /// Largest dynamic shared memory the prefill kernels may use.
    pub(super) prefill_smem_limit: usize,
    /// Streaming multiprocessors.
    pub(super) sms: u32,
}

fn three<T: std::fmt::Debug>(v: Vec<T>) -> [T; 3] {
    v.try_into().expect("three entries")
}

impl Kernels {
    pub(super) fn load(
        module: &Arc<CudaModule>,
        sms: u32,
        smem_optin: usize,
    ) -> Result<Self, Error> {
        let f = |name: String| {
            module
                .load_function(&name)
                .ctx(&format!("loading kernel {name}"))
        };
        let per_dtype = |prefix: &str| -> Result<[CudaFunction; DType::COUNT], Error> {
            Ok(three(
                DType::ALL
                    .iter()
                    .map(|&d| f(format!("{prefix}_{}", dt_name(d))))
                    .collect::<Result<Vec<_>, _>>()?,
            ))
        };
        let per_variant = |prefix: &str| -> Result<[[CudaFunction; 3]; DType::COUNT], Error> {
            let mut out = Vec::new();
            for d in DType::ALL.map(dt_name) {
                let v = VARIANTS
                    .iter()
                    .map(|(_, e)| f(format!("{prefix}_{d}_{e}")))
                    .collect::<Result<Vec<_>, _>>()?;
                out.push(three(v));
            }
            Ok(three(out))
        };
        let prefill = per_variant("attn_prefill")?;
        // Above 48 KiB a kernel must opt in to dynamic shared memory.
        let want = prefill_smem(VARIANTS[2].0);
        let mut limit = 48 * 1024;
        if smem_optin > limit {
            let value = want.min(smem_optin);
            let set = prefill.iter().flatten().try_for_each(|k| {
                k.set_attribute(
                    sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    value as i32,
                )
            });
            if set.is_ok() {
                limit = value;
            }
        }
        Ok(Kernels {
            decode: per_variant("attn_decode")?,
            prefill,
            combine: per_dtype("attn_combine")?,
            axpb: per_dtype("axpb")?,
            fill: per_dtype("fill")?,
            spin: f("kv_spin".into())?,
            prefill_smem_limit: limit,
            sms: sms.max(1),
        })
    }
}

fn to_i32(x: usize, what: &str) -> Result<i32, Error> {
    i32::try_from(x).map_err(|_| Error::Unsupported(format!("{what} = {x} exceeds 2^31 - 1")))
}

fn grid_for(items: u64, sms: u32) -> u32 {
    items.div_ceil(256).clamp(1, u64::from(sms) * 16) as u32
}

/// A launch of `grid` blocks of `threads` threads (one dimension) with `smem` bytes of dynamic
/// shared memory.
pub(super) fn config(grid: (u32, u32, u32), threads: u32, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (threads, 1, 1),
        shared_mem_bytes: smem,
    }
}

/// Launches `f` on `stream` with the arguments in the order every kernel of `kernels.cu`
/// declares its parameters: the 64-bit ones (pointers, sizes) `wide`, then the `int`s `ints`,
/// then the `float`s `floats`; `what` names the launch in errors.
///
/// # Safety
/// `f`'s parameters are exactly these, in this order and of these types, and every pointer among
/// them is a live device allocation as large as the kernel reads and writes with them.
pub(super) unsafe fn launch(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    cfg: LaunchConfig,
    wide: &[u64],
    ints: &[i32],
    floats: &[f32],
    what: &str,
) -> Result<(), Error> {
    let mut args = stream.launch_builder(f);
    for x in wide {
        args.arg(x);
    }
    for x in ints {
        args.arg(x);
    }
    for x in floats {
        args.arg(x);
    }
    // SAFETY: the caller's: the arguments match `f`'s parameters and its allocations.
    unsafe { args.launch(cfg) }.ctx(what)?;
    Ok(())
}

/// Fills `n` elements of dtype `dt` at `ptr` with seeded values `unit * scale`.
pub(super) fn launch_fill(
    k: &Kernels,
    stream: &Arc<CudaStream>,
    dt: usize,
    ptr: u64,
    n: u64,
    seed: u64,
    scale: f32,
) -> Result<(), Error> {
    if n == 0 {
        return Ok(());
    }
    let cfg = config((grid_for(n, k.sms), 1, 1), 256, 0);
    // SAFETY: fill_<dt>(T* p, u64 n, u64 seed, float scale): `ptr` is a live device allocation
    // of at least `n` elements of the dtype, and the arguments match the parameters in type and
    // order.
    unsafe {
        launch(
            stream,
            &k.fill[dt],
            cfg,
            &[ptr, n, seed],
            &[],
            &[scale],
            "launching the fill kernel",
        )
    }
}

/// `dst = src * a + c` over `s` (element offsets), elements of dtype `dt`.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_axpb(
    k: &Kernels,
    stream: &Arc<CudaStream>,
    dt: usize,
    s: &Strided,
    src: u64,
    dst: u64,
    a: f32,
    c: f32,
) -> Result<(), Error> {
    let total = (s.outer as u64) * (s.middle as u64) * (s.inner as u64);
    if total == 0 {
        return Ok(());
    }
    let es = DType::ALL[dt].bytes();
    let src = src + s.src_at as u64 * es;
    let dst = dst + s.dst_at as u64 * es;
    let wide = [
        src,
        dst,
        s.outer as u64,
        s.middle as u64,
        s.inner as u64,
        s.src_outer as u64,
        s.src_middle as u64,
        s.dst_outer as u64,
        s.dst_middle as u64,
    ];
    let cfg = config((grid_for(total.div_ceil(8), k.sms), 1, 1), 256, 0);
    // SAFETY: axpb_<dt>(const T* src, T* dst, u64 outer, middle, inner, s_outer, s_middle,
    // d_outer, d_middle, float a, float c): the arguments match in type and order, and the
    // caller sized both allocations for the extents of `s` (checked by `Strided::extents` where
    // the sizes are not the executor's own).
    unsafe {
        launch(
            stream,
            &k.axpb[dt],
            cfg,
            &wide,
            &[],
            &[a, c],
            "launching the elementwise kernel",
        )
    }
}

/// Key splits of the decode kernel: enough blocks to fill the GPU twice over, at least 128 keys
/// per split, at most 256 splits.
pub(super) fn decode_splits(s: &AttentionShape, sms: u32) -> u32 {
    let rows = (s.q_len as u64) * (s.batch as u64) * (s.q_heads as u64);
    let target = 2 * u64::from(sms.max(1));
    if rows == 0 || rows >= target || s.kv_len <= 256 {
        return 1;
    }
    target
        .div_ceil(rows)
        .min((s.kv_len as u64).div_ceil(128))
        .clamp(1, 256) as u32
}

/// f32 elements of the split-K workspace attention of shape `s` needs on a device with `sms`.
pub(super) fn attention_workspace(s: &AttentionShape, sms: u32) -> u64 {
    if s.q_len >= PREFILL_MIN_Q {
        return 0;
    }
    let splits = decode_splits(s, sms);
    if splits <= 1 {
        return 0;
    }
    (s.q_len as u64)
        * (s.batch as u64)
        * (s.q_heads as u64)
        * u64::from(splits)
        * (s.head_dim as u64 + 2)
}

/// Attention of shape `s` with dtype `dt` on pointers to Q, KV, O and an f32 workspace of
/// `ws_elems` elements.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_attention(
    k: &Kernels,
    stream: &Arc<CudaStream>,
    dt: usize,
    s: &AttentionShape,
    q: u64,
    kv: u64,
    out: u64,
    ws: u64,
    ws_elems: u64,
) -> Result<(), Error> {
    if s.batch == 0 || s.q_len == 0 || s.q_heads == 0 || s.head_dim == 0 {
        return Ok(());
    }
    if s.kv_heads == 0 || !s.q_heads.is_multiple_of(s.kv_heads) {
        return Err(Error::Unsupported(format!(
            "attention with {} query heads and {} key/value heads",
            s.q_heads, s.kv_heads
        )));
    }
    let Some(v) = VARIANTS.iter().position(|(max, _)| s.head_dim <= *max) else {
        return Err(Error::Unsupported(format!(
            "attention head dimension {} (the CUDA kernels support up to 256)",
            s.head_dim
        )));
    };
    let b = to_i32(s.batch, "attention batch")?;
    let hq = to_i32(s.q_heads, "query heads")?;
    let hkv = to_i32(s.kv_heads, "key/value heads")?;
    let lq = to_i32(s.q_len, "query length")?;
    let lkv = to_i32(s.kv_len, "key length")?;
    let d = to_i32(s.head_dim, "head dimension")?;
    let causal = i32::from(s.causal);
    let scale = 1.0 / (s.head_dim as f32).sqrt();
    let rows = s
        .q_len
        .checked_mul(s.batch)
        .ok_or_else(|| Error::Unsupported("attention rows overflow".into()))?;
    if s.q_len >= PREFILL_MIN_Q {
        let tiles = s.q_len.div_ceil(16);
        let gx = to_i32(s.batch * tiles, "attention blocks")? as u32;
        let smem = prefill_smem(s.head_dim);
        if smem > k.prefill_smem_limit {
            return Err(Error::Unsupported(format!(
                "attention head dimension {}: the prefill kernel needs {smem} bytes of shared memory per block, the device allows {}",
                s.head_dim, k.prefill_smem_limit
            )));
        }
        let cfg = config((gx, hq as u32, 1), 128, smem as u32);
        // SAFETY: attn_prefill_<dt>_<v>(const T* q, const T* kv, T* out, int B, int Hq, int Hkv,
        // int Lq, int Lkv, int D, int causal, float scale): arguments match in type and order;
        // q/out hold q_len*batch*q_heads*head_dim and kv 2*kv_len*batch*kv_heads*head_dim
        // elements (sized by the caller); the variant's MAXE*32 >= head_dim; grid.x is
        // batch * ceil(q_len / 16) as the kernel decodes it.
        return unsafe {
            launch(
                stream,
                &k.prefill[dt][v],
                cfg,
                &[q, kv, out],
                &[b, hq, hkv, lq, lkv, d, causal],
                &[scale],
                "launching the prefill attention kernel",
            )
        };
    }
    let splits = decode_splits(s, k.sms);
    let chunk = to_i32(s.kv_len.div_ceil(splits as usize).max(1), "keys per split")?;
    let splits_i = splits as i32;
    if splits > 1 && ws_elems < attention_workspace(s, k.sms) {
        return Err(internal("attention workspace too small"));
    }
    let gx = to_i32(rows, "attention rows")? as u32;
    let cfg = config((gx, hq as u32, splits), 128, 0);
    // SAFETY: attn_decode_<dt>_<v>(const T* q, const T* kv, T* out, float* ws, int B, int Hq,
    // int Hkv, int Lq, int Lkv, int D, int causal, int splits, int chunk, float scale):
    // arguments match in type and order; buffers as for the prefill kernel, and with splits > 1
    // `ws` holds rows*q_heads*splits*(head_dim+2) floats (checked above); splits * chunk covers
    // kv_len.
    unsafe {
        launch(
            stream,
            &k.decode[dt][v],
            cfg,
            &[q, kv, out, ws],
            &[b, hq, hkv, lq, lkv, d, causal, splits_i, chunk],
            &[scale],
            "launching the decode attention kernel",
        )
    }?;
    if splits > 1 {
        let cfg = config((gx, hq as u32, 1), 128, 0);
        // SAFETY: attn_combine_<dt>(const float* ws, T* out, int Hq, int D, int splits): the
        // workspace was written by the decode launch just queued on the same stream.
        unsafe {
            launch(
                stream,
                &k.combine[dt],
                cfg,
                &[ws, out],
                &[hq, d, splits_i],
                &[],
                "launching the attention combine kernel",
            )
        }?;
    }
    Ok(())
}

/// Row-major `C[m, n] = A[m, k] · B[k, n]` (`batch` independent products, contiguous) with
/// cuBLAS on the handle's stream: column-major `C^T = B^T · A^T`, i.e. cuBLAS sees B's buffer as
/// an `n x k` matrix (ld `n`), A's as `k x m` (ld `k`) and C's as `n x m` (ld `n`).
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm(
    blas: &CudaBlas,
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
    batch: usize,
    a: u64,
    b: u64,
    c: u64,
) -> Result<(), Error> {
    use cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType_t};
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    let ty = match dtype {
        DType::Fp16 => cudaDataType_t::CUDA_R_16F,
        DType::Bf16 => cudaDataType_t::CUDA_R_16BF,
        DType::Fp32 => cudaDataType_t::CUDA_R_32F,
    };
    let (mi, ni, ki) = (
        to_i32(m, "GEMM m")?,
        to_i32(n, "GEMM n")?,
        to_i32(k, "GEMM k")?,
    );
    let (alpha, beta) = (1.0f32, 0.0f32);
    let op = cublasOperation_t::CUBLAS_OP_N;
    let compute = cublasComputeType_t::CUBLAS_COMPUTE_32F;
    let algo = cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    let ptr = |p: u64| p as usize as *const c_void;
    let alpha_p = (&alpha as *const f32).cast::<c_void>();
    let beta_p = (&beta as *const f32).cast::<c_void>();
    if batch == 1 {
        // SAFETY: the handle is live and bound to this thread's stream; `a`, `b`, `c` are device
        // allocations of at least m*k, k*n and m*n elements of `ty`; alpha/beta are host f32s
        // (host pointer mode, fp32 compute type); leading dimensions are >= 1.
        unsafe {
            cublas::result::gemm_ex(
                *blas.handle(),
                op,
                op,
                ni,
                mi,
                ki,
                alpha_p,
                ptr(b),
                ty,
                ni,
                ptr(a),
                ty,
                ki.max(1),
                beta_p,
                ptr(c) as *mut c_void,
                ty,
                ni,
                compute,
                algo,
            )
        }
        .ctx("cublasGemmEx")?;
    } else {
        let bi = to_i32(batch, "GEMM batch")?;
        // SAFETY: as above, with `batch` contiguous matrices per operand at the given strides.
        unsafe {
            cublas::result::gemm_strided_batched_ex(
                *blas.handle(),
                op,
                op,
                ni,
                mi,
                ki,
                alpha_p,
                ptr(b),
                ty,
                ni,
                (k * n) as i64,
                ptr(a),
                ty,
                ki.max(1),
                (m * k) as i64,
                beta_p,
                ptr(c) as *mut c_void,
                ty,
                ni,
                (m * n) as i64,
                bi,
                compute,
                algo,
            )
        }
        .ctx("cublasGemmStridedBatchedEx")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_gpu_only_when_rows_are_few() {
        let s = |batch, kv_len| AttentionShape {
            batch,
            q_heads: 32,
            kv_heads: 32,
            q_len: 1,
            kv_len,
            head_dim: 128,
            causal: false,
        };
        assert_eq!(decode_splits(&s(64, 4096), 132), 1);
        let few = decode_splits(&s(1, 4096), 132);
        assert!(few > 1 && few <= 32, "{few}");
        assert_eq!(decode_splits(&s(1, 200), 132), 1);
        assert_eq!(attention_workspace(&s(64, 4096), 132), 0);
        assert_eq!(
            attention_workspace(&s(1, 4096), 132),
            32 * u64::from(few) * 130
        );
    }

    #[test]
    fn prefill_shared_memory_fits_the_opt_in_limits() {
        assert!(prefill_smem(128) <= 48 * 1024);
        assert!(prefill_smem(256) <= 227 * 1024);
    }

    /// Every kernel the executor loads, by name.
    fn entry_points() -> Vec<String> {
        let mut v = vec!["kv_spin".to_string()];
        for d in DType::ALL.map(dt_name) {
            for p in ["fill", "axpb", "attn_combine"] {
                v.push(format!("{p}_{d}"));
            }
            for (_, e) in VARIANTS {
                v.push(format!("attn_decode_{d}_{e}"));
                v.push(format!("attn_prefill_{d}_{e}"));
            }
        }
        v
    }

    /// Compiles the kernels with the real NVRTC (it needs no GPU) for the H100/H200's sm_90, and
    /// checks the cubin defines every entry point the executor loads. Ignored by default: CI's
    /// Debian has only `main`, and libnvrtc is in `non-free` (`nvidia-cuda-toolkit`); run it with
    /// `cargo test -p kvplan-exec --lib -- --ignored nvrtc` where the CUDA toolkit is installed.
    #[test]
    #[ignore = "needs libnvrtc (the CUDA toolkit, not in Debian main): run with --ignored where it is installed"]
    fn kernels_compile_with_nvrtc() {
        // SAFETY: only tries to dlopen libnvrtc.
        assert!(
            unsafe { nvrtc::sys::is_culib_present() },
            "libnvrtc not found: install the CUDA toolkit (or run where it is) to compile the kernels"
        );
        let bin = nvrtc_compile("-arch=sm_90", true).unwrap_or_else(|e| panic!("{e}"));
        for name in entry_points() {
            let sym = format!("{name}\0");
            assert!(
                bin.windows(sym.len()).any(|w| w == sym.as_bytes()),
                "no entry point {name} in the cubin"
            );
        }
    }

    #[test]
    fn kernel_source_names_every_entry_point() {
        for d in DType::ALL.map(dt_name) {
            assert!(SOURCE.contains(&format!("KV_DTYPE({d}, ")));
        }
        for (_, e) in VARIANTS {
            let n = e.trim_start_matches('e');
            assert!(SOURCE.contains(&format!("KV_DECODE(NAME, E, {n})")));
            assert!(SOURCE.contains(&format!("KV_PREFILL(NAME, E, {n})")));
        }
    }
}
