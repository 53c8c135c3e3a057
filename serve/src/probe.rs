//! A test hook: a [`Probe`] sees every step an engine of this thread launches and every step's
//! output processed, with the engine's state at that moment, and every request's end, so
//! property tests can check the engine's invariants step by step (`serve/tests/invariants.rs`).
//!
//! Not part of the simulator's interface (hidden from the docs) and changes nothing it
//! computes. Unused, it costs one relaxed atomic load per step and per request.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sched::{State, Step};

/// What a test watches an engine with. Every method does nothing unless overridden.
pub trait Probe {
    /// A step is launched, as scheduled (its batch in `step`, the state after scheduling it).
    fn launched(&mut self, st: &State<'_>, step: &Step) {
        let _ = (st, step);
    }

    /// A step's output was processed ([`State::complete`]): its tokens generated, the requests
    /// it finished freed.
    fn completed(&mut self, st: &State<'_>, step: &Step) {
        let _ = (st, step);
    }

    /// Request `index` (its position in the run's input) ended, as the cluster driver hears it
    /// from an engine: finished (its last token processed) or rejected.
    fn ended(&mut self, index: usize, finished: bool) {
        let _ = (index, finished);
    }
}

/// Threads watching now: the engines check it before looking for a probe.
static WATCHING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static PROBE: RefCell<Option<Box<dyn Probe>>> = const { RefCell::new(None) };
}

/// Runs `f` with `probe` watching every engine this thread runs in it; the probe is dropped
/// when `f` returns (or unwinds). Keep what it found behind a shared handle
/// (`Rc<RefCell<_>>`).
pub fn watch<R>(probe: Box<dyn Probe>, f: impl FnOnce() -> R) -> R {
    struct Stop;
    impl Drop for Stop {
        fn drop(&mut self) {
            PROBE.with(|p| {
                if let Ok(mut p) = p.try_borrow_mut() {
                    p.take();
                }
            });
            WATCHING.fetch_sub(1, Ordering::Relaxed);
        }
    }
    PROBE.with(|p| *p.borrow_mut() = Some(probe));
    WATCHING.fetch_add(1, Ordering::Relaxed);
    let _stop = Stop;
    f()
}

/// Calls `f` with this thread's probe, if one watches.
#[inline]
pub(crate) fn with(f: impl FnOnce(&mut dyn Probe)) {
    if WATCHING.load(Ordering::Relaxed) == 0 {
        return;
    }
    PROBE.with(|p| {
        if let Some(p) = p.borrow_mut().as_mut() {
            f(&mut **p);
        }
    });
}
