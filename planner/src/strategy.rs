//! What a strategy is to the planner: a [`Planner`] — its name, the defaults it gives a
//! scenario, the scenario fields only it reads, and `plan`. Each strategy's folder implements it
//! next to its own options, decisions and notes; [`crate::registry`] lists the planners, one line
//! each, and a front end may register more.

use kvplan_vocab::cost::CostModel;
use kvplan_vocab::error::Result;
use kvplan_vocab::hardware::HardwareProfile;
use kvplan_vocab::model::ModelSpec;

use crate::types::{Options, Plan, Shape, Strategy};

/// What a planner is asked: a model on a hardware profile, timed on a cost model, for a batch
/// shape (already validated), with the scenario's options.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The model.
    pub model: &'a ModelSpec,
    /// The hardware.
    pub hw: &'a HardwareProfile,
    /// The cost model the plan is timed on (the hardware's, with any host thread).
    pub cost: &'a CostModel,
    /// The batch.
    pub shape: &'a Shape,
    /// The options: shared ones and each strategy's own ([`Options::get`]).
    pub options: &'a Options,
}

/// The batch a scenario gets from a strategy where it gives none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// Sequences per GPU batch.
    pub batch: u32,
    /// Tokens generated per sequence.
    pub gen_len: u32,
}

impl Defaults {
    /// The KVPR paper's latency setting (Table 3, first row): batch 64, 32 tokens.
    pub const LATENCY: Defaults = Defaults {
        batch: 64,
        gen_len: 32,
    };
}

/// A strategy's planner. Implement it in the strategy's folder and add one line to
/// [`crate::registry`] (or call [`crate::registry::register`] from a front end or a test).
pub trait Planner: Send + Sync + 'static {
    /// The name on the command line and in scenario files (`kvpr`, `headinfer`).
    fn name(&self) -> &'static str;

    /// The strategy's handle.
    fn strategy(&self) -> Strategy {
        Strategy::named(self.name())
    }

    /// Whether `simulate`'s side-by-side comparison runs it (the KV-offload strategies do).
    fn compared(&self) -> bool {
        false
    }

    /// The batch a scenario of this strategy gets where it gives none.
    fn defaults(&self) -> Defaults {
        Defaults::LATENCY
    }

    /// The scenario fields only this strategy reads (`headinfer.chunk`): set with another
    /// strategy, each is noted as ignored.
    fn reads(&self) -> &'static [&'static str] {
        &[]
    }

    /// Plans `input`.
    fn plan(&self, input: &Input<'_>) -> Result<Plan>;
}
