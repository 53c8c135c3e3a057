//! What a workload is made of: requests, their closed-loop dependencies, and the fixed batch.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::segment::Segment;

/// One inference request.
///
/// Its prompt is `prompt_tokens` tokens: first the [`prefix`](Self::prefix) chain of shared
/// segments (their lengths sum to at most `prompt_tokens`), then tokens unique to the request.
/// Its generated tokens are unique unless [`output_segment`](Self::output_segment) names them,
/// so that a later request's prefix (the next turn of a conversation) can contain them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Position in the workload.
    pub id: u64,
    /// Arrival time, seconds from the start. For a request that [`follows`](Self::follows)
    /// another this is its nominal (open-loop) arrival, a lower bound: an engine that honours
    /// `follows` may release it later.
    pub arrival_s: f64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens to generate.
    pub output_tokens: u32,
    /// The prompt's leading shared segments; `None` when the whole prompt is unique. Requests
    /// whose chains start with the same segments share those tokens (see [`Segment`]). Many
    /// requests hold the same chain, so it is shared, not copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<Arc<[Segment]>>,
    /// The segment id under which this request's generated tokens (`output_tokens` of them) may
    /// appear in a later request's prefix; `None` when its output is unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_segment: Option<u64>,
    /// A closed-loop follow-up: the request is sent `think_s` seconds after the earlier request
    /// `request` *finishes* (the next turn of a conversation). `None`: it arrives at `arrival_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follows: Option<Follows>,
}

/// A request's closed-loop dependency on an earlier request ([`Request::follows`]).
///
/// A serving engine that honours it releases the request at `finish(request) + think_s` (never
/// before its `arrival_s`, which generators set to the earlier request's arrival plus `think_s`,
/// so the two agree when the earlier request finishes instantly). An engine that ignores it
/// replays the workload open-loop at the `arrival_s` times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Follows {
    /// The id of the earlier request (always smaller than the follower's id).
    pub request: u64,
    /// Seconds between that request's end and this one's release (≥ 0).
    pub think_s: f64,
}

impl Request {
    /// A request with a unique prompt and output and no follow-up dependency.
    pub fn new(id: u64, arrival_s: f64, prompt_tokens: u32, output_tokens: u32) -> Request {
        Request {
            id,
            arrival_s,
            prompt_tokens,
            output_tokens,
            prefix: None,
            output_segment: None,
            follows: None,
        }
    }

    /// The prefix chain's segments (empty when there is none).
    pub fn segments(&self) -> &[Segment] {
        self.prefix.as_deref().unwrap_or(&[])
    }

    /// Tokens of the prompt covered by the prefix chain (the sum of its lengths, at most
    /// `prompt_tokens` in requests from this crate; saturates at `u32::MAX`).
    pub fn prefix_tokens(&self) -> u32 {
        let sum: u64 = self.segments().iter().map(|s| u64::from(s.len)).sum();
        u32::try_from(sum).unwrap_or(u32::MAX)
    }
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
        (0..u64::from(self.batch)).map(|id| Request::new(id, 0.0, self.prompt, self.gen_len))
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
