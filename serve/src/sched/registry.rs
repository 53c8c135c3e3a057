//! The scheduler registry: each [`SchedulerKind`]'s policy ([`policy`]), beside what each kind
//! can do ([`SchedulerSpec`], [`SCHEDULERS`] in [`crate::schedulers`], re-exported here).
//! Settings are checked against a spec's capabilities, never against a kind: adding a scheduler
//! is a variant and its entry in [`SCHEDULERS`], a policy file and one arm in [`policy`].

use super::{Policy, v0, v1};
use crate::schedulers::SchedulerKind;
pub use crate::schedulers::{SCHEDULERS, SchedulerSpec};
pub use crate::versions::Support;

/// A new policy of `kind`.
pub fn policy(kind: SchedulerKind) -> Box<dyn Policy> {
    match kind {
        SchedulerKind::VllmV1 => Box::new(v1::V1),
        SchedulerKind::PrefillFirst => Box::new(v0::PrefillFirst),
        SchedulerKind::Mixed => Box::new(v0::Mixed),
        SchedulerKind::Chunked => Box::new(v0::Chunked),
    }
}
