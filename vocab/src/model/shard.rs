//! Sharding: the per-rank shapes of tensor parallelism, with or without expert parallelism.

use super::spec::{ModelSpec, Moe};
use crate::error::{Error, Result};

impl ModelSpec {
    /// The per-rank shapes of Megatron-style tensor parallelism over `tp` GPUs, as vLLM shards
    /// a model: query heads, the FFN width and the vocabulary are split `tp` ways; KV heads are
    /// split when `tp` divides them and replicated (one per rank) when they divide `tp`. The
    /// hidden size (the residual stream every rank keeps whole) does not change; each layer then
    /// all-reduces its attention and FFN outputs ([`crate::layers::forward_ops`]).
    ///
    /// A mixture of experts is split as vLLM splits it without expert parallelism: every rank
    /// holds every expert, each expert's (and the shared experts') width split `tp` ways
    /// ([`ModelSpec::sharded_with`] for expert parallelism).
    pub fn sharded(&self, tp: u32) -> Result<Self> {
        self.sharded_with(tp, false)
    }

    /// [`ModelSpec::sharded`], with the routed experts divided among the `tp` ranks whole when
    /// `expert_parallel` is set (vLLM's expert-parallel option: `experts / tp` experts per
    /// rank at full width; the shared experts and the rest of the layer stay tensor-parallel).
    /// A dense model ignores `expert_parallel`, as vLLM does.
    pub fn sharded_with(&self, tp: u32, expert_parallel: bool) -> Result<Self> {
        if tp == 0 || tp > 1024 {
            return Err(Error::invalid(
                "tensor_parallel",
                tp,
                "must be from 1 to 1024 GPUs",
            ));
        }
        if self.tensor_parallel != 1 {
            return Err(Error::invalid(
                "tensor_parallel",
                tp,
                format!(
                    "{} is already sharded {} ways",
                    self.name, self.tensor_parallel
                ),
            ));
        }
        if tp == 1 {
            return Ok(self.clone());
        }
        let divides = |what: &str, n: u32| {
            if n.is_multiple_of(tp) {
                Ok(n / tp)
            } else {
                Err(Error::invalid(
                    "tensor_parallel",
                    tp,
                    format!(
                        "{} has {n} {what}, which {tp} GPUs cannot share evenly; use a divisor of {n}",
                        self.name
                    ),
                ))
            }
        };
        let heads = divides("query heads", self.num_heads)?;
        // An all-MoE model never runs its dense width: it need not divide.
        let ffn = if self.moe.is_some() && self.moe_layers() == self.num_layers {
            self.ffn_dim.div_ceil(tp)
        } else {
            divides("FFN columns", self.ffn_dim)?
        };
        let moe = match &self.moe {
            None => None,
            Some(m) => Some(Moe {
                expert_ffn: if expert_parallel {
                    m.expert_ffn
                } else {
                    divides("FFN columns per expert", m.expert_ffn)?
                },
                shared_ffn: if m.shared_ffn == 0 {
                    0
                } else {
                    divides("shared-expert FFN columns", m.shared_ffn)?
                },
                expert_parallel: if expert_parallel {
                    divides("routed experts", m.experts)?;
                    tp
                } else {
                    1
                },
                ..m.clone()
            }),
        };
        let kv_heads = if self.num_kv_heads.is_multiple_of(tp) {
            self.num_kv_heads / tp
        } else if tp.is_multiple_of(self.num_kv_heads) {
            1
        } else {
            return Err(Error::invalid(
                "tensor_parallel",
                tp,
                format!(
                    "{} has {} KV heads: {tp} GPUs must divide them or be a multiple of them",
                    self.name, self.num_kv_heads
                ),
            ));
        };
        Ok(ModelSpec {
            num_heads: heads,
            num_kv_heads: kv_heads,
            ffn_dim: ffn,
            vocab: self.vocab.div_ceil(tp),
            tensor_parallel: tp,
            moe,
            ..self.clone()
        })
    }
}
