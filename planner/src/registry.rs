//! The strategies kvplan knows, one line each, and those a front end registers at run time
//! ([`register`]): names are looked up here, and [`crate::plan::plan`] sends a strategy to its
//! [`Planner`].

use std::sync::{PoisonError, RwLock};

use crate::strategy::Planner;
use crate::types::Strategy;

/// The built-in planners, in the order help and `simulate`'s comparison list them.
static BUILT_IN: [&dyn Planner; 5] = [
    &crate::offload::Offload(Strategy::KVPR),
    &crate::offload::Offload(Strategy::FULL_TRANSFER),
    &crate::offload::Offload(Strategy::GPU_ONLY),
    &crate::headinfer::HeadInferPlanner,
    &crate::runahead::RunaheadPlanner,
];

/// Planners registered at run time, after the built-in ones.
static REGISTERED: RwLock<Vec<&'static dyn Planner>> = RwLock::new(Vec::new());

/// Why a planner could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// Another planner has the name.
    #[error("a strategy named '{0}' is already registered")]
    Taken(&'static str),
    /// The name is empty or not lowercase letters, digits and dashes.
    #[error("strategy name '{0}': use lowercase letters, digits and dashes")]
    BadName(&'static str),
}

/// Adds `planner` to the strategies kvplan knows, after the built-in ones: its name parses
/// everywhere a strategy is named (a scenario's `strategy`, the command line).
pub fn register(planner: &'static dyn Planner) -> Result<(), RegisterError> {
    let name = planner.name();
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok {
        return Err(RegisterError::BadName(name));
    }
    let mut extra = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    let taken = |p: &&dyn Planner| p.name() == name;
    if BUILT_IN.iter().any(taken) || extra.iter().any(taken) {
        return Err(RegisterError::Taken(name));
    }
    extra.push(planner);
    Ok(())
}

/// Every planner: the built-in ones, then those registered.
pub fn all() -> Vec<&'static dyn Planner> {
    let extra = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    BUILT_IN
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect()
}

/// The planner named `name`.
pub fn find(name: &str) -> Option<&'static dyn Planner> {
    if let Some(p) = BUILT_IN.iter().find(|p| p.name() == name) {
        return Some(*p);
    }
    let extra = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    extra.iter().copied().find(|p| p.name() == name)
}

/// The strategy named `name`, if one is registered.
pub fn parse(name: &str) -> Option<Strategy> {
    find(name).map(|p| p.strategy())
}

/// The planner of `strategy`. A handle comes from a constant of a built-in strategy or from a
/// registered planner, so it always has one.
pub fn planner(strategy: Strategy) -> &'static dyn Planner {
    find(strategy.as_str()).expect("a strategy handle names a registered planner")
}

/// Every strategy's name, in registry order.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|p| p.name()).collect()
}

/// The strategies `simulate`'s comparison runs side by side, in registry order.
pub fn compared() -> Vec<Strategy> {
    all()
        .iter()
        .filter(|p| p.compared())
        .map(|p| p.strategy())
        .collect()
}
