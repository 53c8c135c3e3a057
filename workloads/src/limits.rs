//! The request-count and rate limits that generated workloads and trace replays share: a leaf
//! that both [`crate::spec`] and [`crate::trace`] read.

use crate::{Error, Result};

/// Most requests one synthetic workload may hold (10^8, about 8 GB of requests); also the most
/// users (`groups × users_per_group`) of a shared-prefix workload.
pub const MAX_REQUESTS: u64 = 100_000_000;

/// Checks a request rate is finite and positive.
pub(crate) fn check_qps(qps: f64) -> Result<()> {
    if qps.is_finite() && qps > 0.0 {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            field: "qps",
            got: qps.to_string(),
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
