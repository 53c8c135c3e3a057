//! kvplan's simulator: the discrete-event engine ([`engine`]) that runs a
//! [`Schedule`](kvplan_vocab::Schedule) on modelled resources (each device's compute streams, its
//! copy engines and their shared link, the peer links) and returns a
//! [`Timeline`](kvplan_vocab::Timeline). The planners time their candidates on it; the serving
//! simulator (`kvplan-serve`) drives it one iteration at a time.
//!
//! Architecture invariant: the simulator knows the vocabulary (`kvplan-vocab`) and nothing
//! else; it decides nothing, and the same schedule and cost model give the same timeline, bit for
//! bit.
//!
//! ```
//! use kvplan_vocab::{CostModel, DType, HardwareProfile, ScheduleBuilder, WeightFormat};
//! use kvplan_vocab::schedule::{OpKind, Phase, StreamKind, Tag};
//!
//! let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4")?);
//! let mut b = ScheduleBuilder::new();
//! let s = b.stream(0, StreamKind::Compute, "compute");
//! let label = b.label("gemm");
//! let weights = WeightFormat::Dense;
//! let gemm = OpKind::Gemm { m: 64, n: 4096, k: 4096, batch: 1, dtype: DType::Fp16, weights };
//! let tag = Tag { step: 0, layer: 0, batch: 0, group: Tag::NONE, phase: Phase::Prefill };
//! b.push(gemm, s, label, tag, &[]);
//! let timeline = kvplan_sim::simulate(&b.build(), &cost).unwrap();
//! assert!(timeline.makespan() > 0.0);
//! # Ok::<(), kvplan_vocab::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod engine;

pub use engine::{EngineMap, Error, makespan, reference_spans, run, run_with, simulate};
