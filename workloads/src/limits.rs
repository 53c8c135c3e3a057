//! The request-count and rate limits that generated workloads and trace replays share: a leaf
//! that both [`crate::spec`] and [`crate::trace`] read.

use crate::error::{Error, Result};

/// Most requests one synthetic workload may hold (10^8, about 8 GB of requests); also the most
/// users (`groups × users_per_group`) of a shared-prefix workload.
pub const MAX_REQUESTS: u64 = 100_000_000;

/// Latest arrival a workload may ask for, seconds (2^32, 136 years). Simulated time is `f64`
/// seconds, whose step below 2^32 s is at most 0.48 µs; past it a latency of microseconds loses
/// the digits the reports print (at 10^300 s a 14 ms time to first token reads 0).
pub const MAX_ARRIVAL_S: f64 = 4_294_967_296.0;

/// Checks that `count` arrivals at a mean `qps` come within [`MAX_ARRIVAL_S`]; `what` names them
/// (`requests`, `conversations`).
pub(crate) fn check_arrival_span(qps: f64, count: u64, what: &str) -> Result<()> {
    let span = count as f64 / qps;
    if span <= MAX_ARRIVAL_S {
        return Ok(());
    }
    Err(Error::OutOfRange {
        field: "qps",
        got: number(qps),
        expected: format!(
            "a rate at which {count} {what} arrive within {MAX_ARRIVAL_S} s (they would take {span:.3e} s, past which simulated time loses its microseconds): at least {:.3e}",
            count as f64 / MAX_ARRIVAL_S
        ),
    })
}

/// `v` as written, or in scientific notation where plain digits would run long (`1e-300`).
fn number(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Checks a request rate is finite and positive.
pub(crate) fn check_qps(qps: f64) -> Result<()> {
    if qps.is_finite() && qps > 0.0 {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            field: "qps",
            got: number(qps),
            expected: "a finite number of requests per second > 0".into(),
        })
    }
}

/// Checks a request count is within 1..=[`MAX_REQUESTS`].
pub(crate) fn check_requests(n: u64) -> Result<()> {
    if (1..=MAX_REQUESTS).contains(&n) {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            field: "requests",
            got: n.to_string(),
            expected: format!("a number of requests from 1 to {MAX_REQUESTS}"),
        })
    }
}
