//! The CUDA backend. Without a GPU only the "no driver" path runs; the rest is
//! `#[ignore = "needs a CUDA GPU"]` (run with `cargo test -p kvplan-exec -- --ignored`).

use kvplan_exec::{
    AttentionCase, AttentionShape, BackendKind, Error, ExecOptions, attention_accuracy,
    check::CUDA_FP16_ATOL, kvpr_attention_equivalence,
};
use kvplan_planner::plan::Strategy;
use kvplan_vocab::schedule::{HostMemory, StreamKind};

use super::common::{assert_valid, every_kind, h2d, open, opt125m, opt125m_recomputing, schedule};

/// Event timestamps have about half a microsecond of resolution.
const SLACK: f64 = 2e-6;

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

#[test]
fn opening_cuda_without_a_driver_is_an_error_not_a_panic() {
    let r = kvplan_exec::open(BackendKind::Cuda, &ExecOptions::default());
    if driver_present() {
        // A GPU machine: the backend opens.
        let ex = r.unwrap_or_else(|e| panic!("libcuda is present but the backend fails: {e}"));
        assert_eq!(ex.info().backend, BackendKind::Cuda);
        assert!(ex.info().parallelism.unwrap_or(0) > 0);
        eprintln!("{:?}", ex.info());
    } else {
        assert!(matches!(r, Err(Error::NoCudaDriver)), "{:?}", r.err());
        let case = AttentionCase {
            batch: 1,
            hidden: 8,
            q_heads: 1,
            kv_heads: 1,
            head_dim: 8,
            seq_len: 4,
        };
        let e = kvpr_attention_equivalence(BackendKind::Cuda, &ExecOptions::default(), &case, &[1])
            .unwrap_err();
        assert!(matches!(e, Error::NoCudaDriver), "{e}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn runs_a_kvpr_plan_with_valid_spans() {
    let s = opt125m(Strategy::KVPR);
    let mut ex = open(BackendKind::Cuda, 1);
    let t = ex.run(&s).unwrap();
    assert_valid(&s, &t, "cuda", SLACK);
    assert!(t.makespan() > 0.0);
    // A second run reuses the buffers and events.
    let t = ex.run(&s).unwrap();
    assert_valid(&s, &t, "cuda", SLACK);
    let s = opt125m_recomputing(32);
    let t = ex.run(&s).unwrap();
    assert_valid(&s, &t, "cuda", SLACK);
    let s = opt125m(Strategy::FULL_TRANSFER);
    let t = ex.run(&s).unwrap();
    assert_valid(&s, &t, "cuda", SLACK);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn runs_every_op_kind() {
    let s = every_kind();
    let t = open(BackendKind::Cuda, 1).run(&s).unwrap();
    assert_valid(&s, &t, "cuda", SLACK);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn kvpr_attention_matches_full_transfer_within_fp16_tolerance() {
    for (q_heads, kv_heads) in [(4, 4), (8, 2)] {
        let case = AttentionCase {
            batch: 2,
            hidden: 64,
            q_heads,
            kv_heads,
            head_dim: 16,
            seq_len: 37,
        };
        let splits = [0, 1, 18, 37];
        let r =
            kvpr_attention_equivalence(BackendKind::Cuda, &ExecOptions::default(), &case, &splits)
                .unwrap();
        for e in r {
            assert!(e.max_abs_diff <= CUDA_FP16_ATOL, "{case:?}: {e:?}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn attention_kernels_match_the_reference() {
    for (q_len, kv_len, causal, q_heads, kv_heads, head_dim) in [
        (1, 300, false, 4, 4, 64),   // decode, one split
        (1, 3000, false, 4, 2, 128), // decode, split keys + combine, GQA
        (1, 1000, false, 2, 1, 256), // decode, e8
        (40, 40, true, 4, 2, 64),    // causal prefill
        (33, 70, true, 2, 2, 128),   // prefill with a cached prefix
        (16, 16, true, 2, 2, 256),   // prefill, opt-in shared memory
        (3, 50, true, 2, 2, 80),     // few causal queries on the decode kernel, odd head_dim
    ] {
        let shape = AttentionShape {
            batch: 2,
            q_heads,
            kv_heads,
            q_len,
            kv_len,
            head_dim,
            causal,
        };
        let a = attention_accuracy(BackendKind::Cuda, &ExecOptions::default(), &shape).unwrap();
        assert!(a.max_abs_diff <= CUDA_FP16_ATOL, "{shape:?}: {a:?}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn pinned_host_to_device_copies_are_fast() {
    let bytes = 256u64 << 20;
    let ops: Vec<_> = (0..5)
        .map(|_| (h2d(bytes, HostMemory::Pinned), 0))
        .collect();
    let s = schedule(&[StreamKind::H2D], &ops);
    let t = open(BackendKind::Cuda, 1).run(&s).unwrap();
    let mut d: Vec<f64> = t.spans.iter().map(|s| s.duration()).collect();
    d.sort_by(f64::total_cmp);
    let gbps = bytes as f64 / d[2] / 1e9;
    assert!(gbps > 10.0, "pinned H2D at {gbps:.1} GB/s");
}
