//! kvplan's planner: the shared vocabulary (models, hardware, cost model, memory, the Schedule IR
//! and Timeline) and every decision (the KVPR split; HeadInfer and KV-Runahead later).
//!
//! ```
//! use kvplan_planner::{CostModel, HardwareProfile, ModelSpec};
//! use kvplan_planner::plan::{plan, Options, Shape, Strategy};
//!
//! let model = ModelSpec::preset("opt-6.7b")?;
//! let hw = HardwareProfile::preset("a100-40g-pcie4")?;
//! let cost = CostModel::new(&hw);
//! let shape = Shape { batch: 64, gpu_batches: 1, prompt: 128, gen_len: 4 };
//! let p = plan(&model, &hw, &cost, &shape, Strategy::Kvpr, &Options::default())?;
//! assert!(p.decisions.splits().iter().all(|s| s.split.recompute_tokens > 0));
//! # Ok::<(), kvplan_planner::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod attention;
pub mod calibration;
pub mod cost;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod hardware;
pub mod headinfer;
pub mod kernel_model;
pub mod kvpr;
pub mod limits;
pub mod memory;
pub mod model;
pub mod plan;
pub mod report;
pub mod runahead;
pub mod scenario;
pub mod schedule;
pub mod serving;
pub mod timeline;

pub use attention::AttentionBatch;
pub use cost::CostModel;
pub use dtype::DType;
pub use error::{Error, Result};
pub use hardware::HardwareProfile;
pub use model::ModelSpec;
pub use schedule::{Schedule, ScheduleBuilder};
pub use timeline::Timeline;
