//! kvplan's planners: every decision about moving and recomputing the KV cache. The offload
//! planner (KVPR's recompute/transfer split from a linear program, plain KV offload, all-on-GPU:
//! [`offload`], its linear program [`offload::kvpr`]), HeadInfer's head-group offload
//! ([`headinfer`]) and KV-Runahead's context partition across devices ([`runahead`]) each live in
//! their own folder and turn a model, a hardware profile and a shape into a
//! [`Schedule`](kvplan_vocab::Schedule), timing their candidates on the simulator (`kvplan-sim`).
//! Each implements the [`strategy::Planner`] trait and has one line in [`registry`] (a front end
//! may register more at run time). They share the plan types of [`types`] (a leaf that knows no
//! strategy); [`plan`] dispatches a strategy to its planner through the registry and re-exports
//! those types, and no planner imports it. [`scenario`] checks a scenario file and its flags into
//! one plan request (the peer-link override of [`link`] applied to its hardware once), and
//! [`run`] plans and simulates it into a report ([`report`]).
//!
//! Architecture invariant: the planners speak the vocabulary (`kvplan-vocab`) and time with the
//! simulator (`kvplan-sim`); they know no executor, serving engine or command line.
//!
//! ```
//! use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
//! use kvplan_planner::plan::{plan, splits, Options, Shape, Strategy};
//!
//! let model = ModelSpec::preset("opt-6.7b")?;
//! let hw = HardwareProfile::preset("a100-40g-pcie4")?;
//! let cost = CostModel::new(&hw);
//! let shape = Shape { batch: 64, gpu_batches: 1, prompt: 128, gen_len: 4 };
//! let p = plan(&model, &hw, &cost, &shape, Strategy::KVPR, &Options::default())?;
//! assert!(splits(&p.decisions).iter().all(|s| s.split.recompute_tokens > 0));
//! # Ok::<(), kvplan_vocab::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod headinfer;
pub mod link;
pub mod offload;
pub mod plan;
pub mod registry;
pub mod report;
pub mod run;
pub mod runahead;
pub mod scenario;
pub mod strategy;
pub mod types;
