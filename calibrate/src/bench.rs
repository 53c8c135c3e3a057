//! The two halves of every microbenchmark: a schedule of back-to-back repetitions of each op
//! ([`repeated`]) and the median span of each op's repetitions ([`medians`]). Shared by the
//! copy and GEMM microbenchmarks ([`crate::micro`]) and the kernel-table measurements
//! ([`crate::kernels`]).

use kvplan_vocab::Timeline;
use kvplan_vocab::schedule::{OpKind, Phase, Schedule, ScheduleBuilder, StreamKind, Tag};

/// The tag every benchmark op carries.
pub(crate) const TAG: Tag = Tag {
    step: 0,
    layer: Tag::NONE,
    batch: 0,
    group: Tag::NONE,
    phase: Phase::Decode,
};

/// A schedule of `reps` back-to-back copies of each op on one stream of `kind`.
pub(crate) fn repeated(kind: StreamKind, ops: &[OpKind], reps: u32) -> Schedule {
    let mut b = ScheduleBuilder::with_capacity(ops.len() * reps as usize, 0);
    let s = b.stream(0, kind, "bench");
    let l = b.label("bench");
    for op in ops {
        for _ in 0..reps {
            b.push(*op, s, l, TAG, &[]);
        }
    }
    b.build()
}

/// Median duration of each group of `reps` consecutive ops.
pub(crate) fn medians(t: &Timeline, groups: usize, reps: u32) -> Vec<f64> {
    (0..groups)
        .map(|g| {
            median(
                t.spans[g * reps as usize..(g + 1) * reps as usize]
                    .iter()
                    .map(|s| s.duration())
                    .collect(),
            )
        })
        .collect()
}

/// The median of `v` (the upper one of an even count); `None` when empty.
pub(crate) fn median_of(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn median(v: Vec<f64>) -> f64 {
    median_of(v).expect("a group has at least one repetition")
}
