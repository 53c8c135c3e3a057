//! How long work reports how far it has come. A library calls a [`Progress`]; the front end
//! decides whether and how to show it (the CLI draws a bar on a terminal), so no library
//! depends on a display crate.

/// Receives a long computation's progress. Every method has a do-nothing default.
pub trait Progress: Sync {
    /// The work (described by `what`, e.g. "requests served") has `total` units; called again
    /// when a new stage starts.
    fn start(&self, total: u64, what: &str) {
        let _ = (total, what);
    }

    /// `done` units of the current stage's total are complete.
    fn set(&self, done: u64) {
        let _ = done;
    }

    /// One more unit is complete (work finished in any order, e.g. a parallel sweep's points).
    fn advance(&self) {}
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {}
