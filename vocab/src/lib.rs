//! kvplan's shared vocabulary, the ground floor every other crate speaks: what a model
//! ([`model`]), a GPU and its links ([`hardware`], [`calibration`], [`serving`]) and a dtype
//! ([`dtype`]) are; what an op costs on them ([`cost`], [`kernel_model`], [`attention`]); the
//! kernels of a decoder layer ([`layers`]); what a plan needs in memory ([`memory`]); the
//! Schedule IR that planners emit and simulator and executor run ([`schedule`]) and the
//! Timeline they return ([`timeline`]); the limits on every size ([`limits`]) and the typed
//! errors that name the field at fault ([`error`]); what kind of run a scenario file describes
//! ([`kind`]).
//!
//! Architecture invariant: this crate knows no planner, simulator, executor or command line.
//! It depends on serde, toml and thiserror only, and nothing here decides anything.
//!
//! ```
//! use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
//! use kvplan_vocab::layers::layer_kernels;
//!
//! let model = ModelSpec::preset("opt-6.7b")?;
//! let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4")?);
//! let layer_s: f64 = layer_kernels(&model, 8, 1, 128).iter().map(|(_, k)| cost.duration(k)).sum();
//! assert!(layer_s > 0.0);
//! # Ok::<(), kvplan_vocab::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod attention;
pub mod calibration;
pub mod cost;
pub mod dtype;
pub mod error;
pub mod hardware;
pub mod host;
pub mod kernel_model;
pub mod kind;
pub mod layers;
pub mod limits;
pub mod memory;
pub mod model;
pub mod overlay;
pub mod progress;
pub mod quant;
pub mod schedule;
pub mod serving;
pub mod timeline;

pub use attention::AttentionBatch;
pub use cost::CostModel;
pub use dtype::DType;
pub use error::{Error, Result};
pub use hardware::{HardwareProfile, parse_price_overrides};
pub use kind::RunKind;
pub use model::ModelSpec;
pub use progress::{Progress, Silent};
pub use quant::{KvCacheDtype, Quantization, WeightFormat};
pub use schedule::{Schedule, ScheduleBuilder};
pub use timeline::Timeline;
