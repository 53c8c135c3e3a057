//! The progress bar of long runs (a serving run, a capacity search, the CPU executor): the
//! libraries report through [`kvplan_vocab::Progress`]; this draws it with indicatif on stderr
//! when it is a terminal, once a run has taken a second.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvplan_vocab::{Progress, Silent};

/// Runs shorter than this draw nothing.
const AFTER: Duration = Duration::from_secs(1);

/// A bar on stderr, hidden until the run has taken [`AFTER`]; cleared when dropped.
struct Bar {
    bar: ProgressBar,
    since: Instant,
    shown: AtomicBool,
}

impl Progress for Bar {
    fn start(&self, total: u64, what: &str) {
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_message(what.to_string());
        self.show();
    }

    fn set(&self, done: u64) {
        self.bar.set_position(done);
        self.show();
    }

    fn advance(&self) {
        self.bar.inc(1);
        self.show();
    }
}

impl Bar {
    fn show(&self) {
        if self.since.elapsed() >= AFTER && !self.shown.swap(true, Ordering::Relaxed) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(200));
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// The progress display of a run: a bar where stderr is a terminal, else nothing.
pub fn bar() -> Box<dyn Progress> {
    if !std::io::stderr().is_terminal() {
        return Box::new(Silent);
    }
    let template = "{bar:40} {pos}/{len} {msg}, {elapsed} elapsed, about {eta} left";
    let style = ProgressStyle::with_template(template).expect("valid template");
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()).with_style(style);
    Box::new(Bar {
        bar,
        since: Instant::now(),
        shown: AtomicBool::new(false),
    })
}
