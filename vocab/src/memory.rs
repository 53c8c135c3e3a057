//! Memory accounting: what a plan keeps on the GPU and on the host, and whether it fits.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::hardware::HardwareProfile;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// What an allocation holds: every plan's memory items are one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum MemoryKind {
    /// All the weights.
    Weights,
    /// Offloaded weights' GPU side: embeddings plus two layer buffers.
    WeightBuffers,
    /// The whole KV cache (GPU for resident strategies, host for offloading ones).
    KvCache,
    /// The KV cache quantised to 4 bits.
    KvCache4bit,
    /// The scales and zero points of the 4-bit cache.
    KvQuantScales,
    /// Two layers' (or two (layer, GPU batch) units') KV buffers of an offloaded cache.
    KvLayerBuffers,
    /// Two head groups' ping-pong KV buffers (HeadInfer).
    KvGroupBuffers,
    /// KVPR's stored layer inputs `X` (host).
    RecomputeActivations,
    /// KVPR's two GPU buffers for the `X` being recomputed from.
    RecomputeActivationBuffers,
    /// The prefill pass's working set at its peak ([`prefill_working_set`]).
    Activations,
    /// Hidden states of every GPU batch between layers (column-by-column).
    HiddenStates,
    /// Memory the runtime cannot give to tensors (allocator fragmentation, framework buffers).
    RuntimeReserve,
}

impl MemoryKind {
    /// The name in reports and error messages.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Weights => "weights",
            MemoryKind::WeightBuffers => "weights (embeddings + 2 layer buffers)",
            MemoryKind::KvCache => "kv cache",
            MemoryKind::KvCache4bit => "kv cache (4-bit)",
            MemoryKind::KvQuantScales => "kv quantisation scales",
            MemoryKind::KvLayerBuffers => "kv buffers (2 layers)",
            MemoryKind::KvGroupBuffers => "kv ping-pong buffers (2 head groups)",
            MemoryKind::RecomputeActivations => "recompute activations",
            MemoryKind::RecomputeActivationBuffers => "recompute activation buffers (2 units)",
            MemoryKind::Activations => "activations (prefill peak)",
            MemoryKind::HiddenStates => "hidden states of all GPU batches",
            MemoryKind::RuntimeReserve => "runtime reserve",
        }
    }
}

/// One allocation: what it holds and its size. Serialises as `{kind, name, bytes}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryItem {
    /// What it holds.
    pub kind: MemoryKind,
    /// Bytes.
    pub bytes: u64,
}

impl Serialize for MemoryItem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("MemoryItem", 3)?;
        st.serialize_field("kind", &self.kind)?;
        st.serialize_field("name", self.kind.name())?;
        st.serialize_field("bytes", &self.bytes)?;
        st.end()
    }
}

/// Peak memory of a plan, as typed allocations on the GPU and on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryPlan {
    /// GPU allocations.
    pub gpu: Vec<MemoryItem>,
    /// Host allocations.
    pub host: Vec<MemoryItem>,
}

fn total(items: &[MemoryItem]) -> u64 {
    items.iter().map(|i| i.bytes).sum()
}

fn breakdown(items: &[MemoryItem]) -> String {
    let mut v: Vec<&MemoryItem> = items.iter().filter(|i| i.bytes > 0).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.kind.cmp(&b.kind)));
    v.iter()
        .map(|i| {
            let g = i.bytes as f64 / GIB;
            if g >= 0.1 {
                format!("{} {g:.2} GiB", i.kind.name())
            } else {
                format!(
                    "{} {:.1} MiB",
                    i.kind.name(),
                    i.bytes as f64 / (1024.0 * 1024.0)
                )
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl MemoryPlan {
    /// Adds a GPU allocation (zero-byte items are kept out).
    pub fn gpu(&mut self, kind: MemoryKind, bytes: u64) {
        if bytes > 0 {
            self.gpu.push(MemoryItem { kind, bytes });
        }
    }

    /// Adds a host allocation (zero-byte items are kept out).
    pub fn host(&mut self, kind: MemoryKind, bytes: u64) {
        if bytes > 0 {
            self.host.push(MemoryItem { kind, bytes });
        }
    }

    /// Peak GPU bytes.
    pub fn gpu_bytes(&self) -> u64 {
        total(&self.gpu)
    }

    /// Peak host bytes.
    pub fn host_bytes(&self) -> u64 {
        total(&self.host)
    }

    /// Bytes of the `kind` items on the GPU (0 if absent).
    pub fn gpu_item(&self, kind: MemoryKind) -> u64 {
        self.gpu
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| i.bytes)
            .sum()
    }

    /// Bytes of the `kind` items on the host (0 if absent).
    pub fn host_item(&self, kind: MemoryKind) -> u64 {
        self.host
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| i.bytes)
            .sum()
    }

    /// Fails with [`Error::DoesNotFit`] when the GPU or host side exceeds `hw`. `what` names the
    /// plan; `gpu_advice` / `host_advice` say what to change.
    pub fn check(
        &self,
        hw: &HardwareProfile,
        what: &str,
        gpu_advice: &str,
        host_advice: &str,
    ) -> Result<()> {
        let need = self.gpu_bytes();
        let have = hw.gpu.usable_bytes();
        if need > have {
            return Err(Error::DoesNotFit {
                what: what.into(),
                resource: format!(
                    "GPU memory of {} ({:.1} GiB less {:.1} GiB reserved)",
                    hw.name,
                    hw.gpu.memory_bytes as f64 / GIB,
                    hw.gpu.reserved_bytes as f64 / GIB
                ),
                need_gib: need as f64 / GIB,
                have_gib: have as f64 / GIB,
                short_gib: (need - have) as f64 / GIB,
                breakdown: breakdown(&self.gpu),
                advice: gpu_advice.into(),
            });
        }
        let need = self.host_bytes();
        let have = hw.host.ram_bytes;
        if need > have {
            return Err(Error::DoesNotFit {
                what: what.into(),
                resource: format!("host RAM of {}", hw.name),
                need_gib: need as f64 / GIB,
                have_gib: have as f64 / GIB,
                short_gib: (need - have) as f64 / GIB,
                breakdown: breakdown(&self.host),
                advice: host_advice.into(),
            });
        }
        Ok(())
    }
}

/// The prefill forward pass's transient memory at its peak, beyond the stored KV (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkingSet {
    /// Per-row tensors of the attention block: residual, normed input, input embeddings
    /// (`3h`), Q and the attention output (`2·q_dim`), this layer's new K,V (`2·kv_dim`).
    pub attention_rows: u64,
    /// Per-row tensors of the MLP: `3h` as above plus `act(gate)`, `up` and their product
    /// (`3·ffn`; `2·ffn` for an ungated FFN).
    pub mlp_rows: u64,
    /// Hugging Face's 4-D additive causal mask of a chunk over its prefix (`chunk × S`,
    /// materialised when a chunk attends over earlier chunks; lives for the whole forward).
    pub causal_mask: u64,
    /// K,V of one layer expanded from KV heads to query heads for SDPA (`repeat_kv`, GQA only),
    /// plus the old copy of the layer's cache while `torch.cat` appends the chunk (chunked only).
    pub attention_prefix: u64,
    /// fp32 logits of the pass's last rows.
    pub logits: u64,
    /// The peak: `causal_mask + max(attention_rows + attention_prefix, mlp_rows, residual +
    /// logits)`.
    pub peak: u64,
}

/// How a runtime's attention materialises its inputs during a prefill pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionImpl {
    /// FlashAttention-style: native GQA, causal offset for a chunk after a prefix; nothing
    /// beyond Q, K, V and the output.
    Fused,
    /// PyTorch SDPA with `is_causal` over the pass: K,V expanded from KV heads to query heads
    /// (`repeat_kv`, GQA only) over the attended context.
    Sdpa,
    /// SDPA for a chunk after a prefix (Hugging Face chunked prefill): the expansion as above,
    /// a 4-D additive causal mask `chunk x context`, and the old copy of the layer's cache while
    /// `torch.cat` appends the chunk.
    ChunkedSdpa,
}

/// One prefill forward pass: `batch` sequences, each adding `q_tokens` tokens after
/// `context - q_tokens` already cached, with `logits_rows` rows of fp32 logits at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillPass {
    /// Sequences.
    pub batch: u64,
    /// New tokens per sequence in this pass (the prompt, or a chunk).
    pub q_tokens: u64,
    /// Tokens attended per sequence: the prefix plus the new tokens.
    pub context: u64,
    /// How attention materialises its inputs.
    pub attention: AttentionImpl,
    /// Rows of fp32 logits the pass ends with (one per sequence for generation; 0 to leave
    /// them out, as HeadInfer's fitted runtime reserve covers them).
    pub logits_rows: u64,
}

fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// The working set of a prefill pass at its peak: the one activation-memory model every
/// planner uses (KVPR / offload plans, HeadInfer, each KV-Runahead device).
///
/// Per row (token of the pass) the attention block holds the residual, the normed input and
/// the input embeddings (`3h`), Q and the attention output (`2·q_dim`) and this layer's new
/// K,V (`2·kv_dim`); the MLP the same `3h` plus `act(gate)`, `up` and their product (`3·ffn`;
/// `2·ffn` ungated; a mixture of experts' per token, [`crate::ModelSpec::ffn_live_elems`]). The two blocks do not overlap; the causal mask lives for the whole pass;
/// logits come after the last layer, when only the residual is left.
pub fn prefill_working_set(model: &crate::model::ModelSpec, pass: &PrefillPass) -> WorkingSet {
    let p = model.dtype_bytes();
    let h = u64::from(model.hidden);
    let q = model.q_dim();
    let kvd = model.kv_dim();
    let rows = mul(pass.batch, pass.q_tokens);
    let attention_rows = mul(rows, (3 * h + 2 * q + 2 * kvd) * p);
    let mlp_rows = mul(rows, (3 * h + model.ffn_live_elems()) * p);
    let gqa_expand = if q > kvd { 2 * q * p } else { 0 };
    let attended = mul(pass.batch, pass.context.max(pass.q_tokens));
    let prefix = pass.context.saturating_sub(pass.q_tokens);
    let (causal_mask, attention_prefix) = match pass.attention {
        AttentionImpl::Fused => (0, 0),
        AttentionImpl::Sdpa => (0, mul(attended, gqa_expand)),
        AttentionImpl::ChunkedSdpa if prefix > 0 => (
            mul(rows, mul(pass.context, p)),
            mul(attended, gqa_expand).saturating_add(mul(
                mul(pass.batch, prefix),
                model.kv_bytes_per_token_layer(),
            )),
        ),
        AttentionImpl::ChunkedSdpa => (0, mul(attended, gqa_expand)),
    };
    let logits = mul(pass.logits_rows, u64::from(model.vocab) * 4);
    let peak = causal_mask.saturating_add(
        attention_rows
            .saturating_add(attention_prefix)
            .max(mlp_rows)
            .max(mul(pass.batch, h * p).saturating_add(logits)),
    );
    WorkingSet {
        attention_rows,
        mlp_rows,
        causal_mask,
        attention_prefix,
        logits,
        peak,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_reports_the_shortfall_and_the_largest_items() {
        let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        let mut m = MemoryPlan::default();
        m.gpu(MemoryKind::Weights, 12 << 30);
        m.gpu(MemoryKind::KvCache, 30 << 30);
        let e = m
            .check(&hw, "gpu-only plan", "offload the KV cache", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs 42.00 GiB"), "{e}");
        assert!(
            e.contains("offers 39.00 GiB") && e.contains("short by 3.00 GiB"),
            "{e}"
        );
        assert!(e.contains("kv cache 30.00 GiB, weights 12.00 GiB"), "{e}");
        assert!(e.ends_with("offload the KV cache"), "{e}");
        let mut ok = MemoryPlan::default();
        ok.gpu(MemoryKind::Weights, 1 << 30);
        ok.host(MemoryKind::KvCache, 1 << 30);
        assert!(ok.check(&hw, "x", "", "").is_ok());
    }

    #[test]
    fn working_set_by_attention_implementation() {
        let m = crate::ModelSpec::preset("llama-3-8b").unwrap();
        let pass = |attention, q_tokens, context, logits_rows| {
            prefill_working_set(
                &m,
                &PrefillPass {
                    batch: 2,
                    q_tokens,
                    context,
                    attention,
                    logits_rows,
                },
            )
        };
        // Gated MLP rows: 3h + 3·ffn elements of 2 bytes, larger than the attention block.
        let fused = pass(AttentionImpl::Fused, 1024, 1024, 0);
        assert_eq!(fused.mlp_rows, 2 * 1024 * (3 * 4096 + 3 * 14336) * 2);
        assert_eq!(fused.peak, fused.mlp_rows);
        // SDPA expands K,V to the 32 query heads over the attended context (GQA).
        let sdpa = pass(AttentionImpl::Sdpa, 1024, 4096, 0);
        assert_eq!(sdpa.attention_prefix, 2 * 4096 * 2 * 4096 * 2);
        // Chunked SDPA adds the mask (chunk × context) and the old cache copy of the prefix.
        let chunked = pass(AttentionImpl::ChunkedSdpa, 1024, 4096, 0);
        assert_eq!(chunked.causal_mask, 2 * 1024 * 4096 * 2);
        assert_eq!(
            chunked.attention_prefix,
            sdpa.attention_prefix + 2 * 3072 * m.kv_bytes_per_token_layer()
        );
        assert!(chunked.peak > sdpa.peak);
        // Logits of one row per sequence: fp32 over the vocabulary; they dominate a tiny pass.
        let tiny = pass(AttentionImpl::Fused, 1, 1, 2);
        assert_eq!(tiny.logits, 2 * 128_256 * 4);
        assert_eq!(tiny.peak, 2 * 4096 * 2 + tiny.logits);
    }

    #[test]
    fn items_serialise_with_kind_and_name() {
        let item = MemoryItem {
            kind: MemoryKind::KvCache,
            bytes: 7,
        };
        assert_eq!(
            serde_json::to_string(&item).unwrap(),
            r#"{"kind":"kv-cache","name":"kv cache","bytes":7}"#
        );
    }
}
