//! The backend-independent correctness checks, on the CPU backend.

use kvplan_exec::{
    AttentionCase, AttentionShape, BackendKind, Error, ExecOptions, attention_accuracy,
    kvpr_attention_equivalence,
};

const SPLITS: [u32; 5] = [0, 1, 17, 36, 37];

fn assert_exact(case: AttentionCase) {
    let r = kvpr_attention_equivalence(BackendKind::Cpu, &ExecOptions::default(), &case, &SPLITS)
        .unwrap();
    assert_eq!(r.len(), SPLITS.len());
    for (e, &l) in r.iter().zip(&SPLITS) {
        assert_eq!(e.recompute, l);
        assert!(
            e.bit_identical && e.max_abs_diff == 0.0 && e.max_rel_diff == 0.0,
            "l = {l}: {e:?}"
        );
    }
}

#[test]
fn kvpr_attention_is_bit_identical_on_the_cpu_mha() {
    assert_exact(AttentionCase {
        batch: 2,
        hidden: 64,
        q_heads: 4,
        kv_heads: 4,
        head_dim: 16,
        seq_len: 37,
    });
}

#[test]
fn kvpr_attention_is_bit_identical_on_the_cpu_gqa() {
    assert_exact(AttentionCase {
        batch: 2,
        hidden: 64,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 16,
        seq_len: 37,
    });
}

#[test]
fn bad_check_inputs_are_errors() {
    let case = AttentionCase {
        batch: 1,
        hidden: 16,
        q_heads: 4,
        kv_heads: 4,
        head_dim: 4,
        seq_len: 5,
    };
    let e = kvpr_attention_equivalence(BackendKind::Cpu, &ExecOptions::default(), &case, &[6])
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
    let gqa = AttentionCase {
        kv_heads: 3,
        ..case
    };
    let e = kvpr_attention_equivalence(BackendKind::Cpu, &ExecOptions::default(), &gqa, &[1])
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
}

#[test]
fn cpu_attention_matches_the_f64_reference() {
    for (q_len, kv_len, causal, q_heads, kv_heads) in [
        (1, 300, false, 4, 4),
        (1, 77, false, 8, 2),
        (20, 20, true, 4, 1),
        (9, 30, true, 2, 2),
        (5, 3, true, 2, 2), // the first queries see no key: zeros
    ] {
        let shape = AttentionShape {
            batch: 2,
            q_heads,
            kv_heads,
            q_len,
            kv_len,
            head_dim: 24,
            causal,
        };
        let a = attention_accuracy(BackendKind::Cpu, &ExecOptions::default(), &shape).unwrap();
        assert!(a.max_abs_diff < 1e-5, "{shape:?}: {a:?}");
        assert!(a.max_abs_reference > 0.0);
    }
}
