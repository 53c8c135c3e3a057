//! Request workloads for kvplan. This first version generates the fixed batch of equal-length
//! requests that offload planning (KVPR, FlexGen-style) evaluates; length distributions,
//! arrival processes and trace files come with the serving simulator.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// Workload errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A size out of range.
    #[error("{field}: must be at least 1 (got {value})")]
    NonPositive {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
}

/// One inference request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Position in the workload.
    pub id: u64,
    /// Arrival time, seconds from the start.
    pub arrival_s: f64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens to generate.
    pub output_tokens: u32,
}

/// `batch` requests, all present at time 0, each with the same prompt and output length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedBatch {
    /// Requests.
    pub batch: u32,
    /// Prompt tokens per request.
    pub prompt: u32,
    /// Output tokens per request.
    pub gen_len: u32,
}

impl FixedBatch {
    /// A checked fixed batch.
    pub fn new(batch: u32, prompt: u32, gen_len: u32) -> Result<Self, Error> {
        for (field, v) in [("batch", batch), ("prompt", prompt), ("gen", gen_len)] {
            if v == 0 {
                return Err(Error::NonPositive { field, value: 0 });
            }
        }
        Ok(FixedBatch {
            batch,
            prompt,
            gen_len,
        })
    }

    /// The requests, in id order.
    pub fn requests(&self) -> impl Iterator<Item = Request> + '_ {
        (0..u64::from(self.batch)).map(|id| Request {
            id,
            arrival_s: 0.0,
            prompt_tokens: self.prompt,
            output_tokens: self.gen_len,
        })
    }

    /// Total tokens the KV cache must hold at the end (`batch * (prompt + gen)`).
    pub fn kv_tokens(&self) -> u64 {
        u64::from(self.batch) * (u64::from(self.prompt) + u64::from(self.gen_len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_batch_is_equal_length_and_checked() {
        let w = FixedBatch::new(4, 128, 32).unwrap();
        let r: Vec<Request> = w.requests().collect();
        assert_eq!(r.len(), 4);
        assert!(
            r.iter()
                .all(|q| q.prompt_tokens == 128 && q.output_tokens == 32 && q.arrival_s == 0.0)
        );
        assert_eq!(w.kv_tokens(), 4 * 160);
        let e = FixedBatch::new(4, 0, 1).unwrap_err().to_string();
        assert!(e.contains("prompt") && e.contains("at least 1"), "{e}");
    }
}
