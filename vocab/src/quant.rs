//! Quantised weights and the KV cache's element type, with vLLM's names: its quantization
//! option (`fp8`, `awq`, `gptq`) and its KV cache dtype option (`auto`, `fp8`).
//!
//! What is modelled (vLLM v0.15.1):
//! - **`kv_cache_dtype = "fp8"`**: one byte per K and V element (e4m3, vLLM's `fp8` /
//!   `fp8_e4m3`), wherever the cache is counted or moved: blocks per GPU, swap and KV copies,
//!   attention's K and V reads. Queries, outputs and attention's arithmetic stay 16-bit.
//! - **`quantization = "fp8"`**: the decoder layers' linear weights (Q, K, V, O, the FFN's and
//!   the experts' matrices) one byte each; biases, norms, routers, embeddings and the LM head
//!   stay in the model's dtype (vLLM's `Fp8LinearMethod` quantises `LinearBase` layers only).
//!   GEMMs run at the GPU's fp8 tensor rate on compute capability >= 8.9 where the profile gives
//!   one (`gpu.peak_tflops.fp8`), else at the 16-bit rate: on 8.0 <= cc < 8.9 vLLM runs fp8
//!   weight-only through Marlin (W8A16), and a profile without an fp8 peak is costed the same
//!   way. Activations stay 16-bit bytes in either case.
//! - **`quantization = "awq"` / `"gptq"`**: the same linear weights as 4-bit integers with a
//!   16-bit scale and a 4-bit zero point per group of 128 input rows (AutoAWQ's and GPTQ's
//!   `qweight`, `scales`, `qzeros` at `group_size = 128`): `0.5 + 2.5/128 = 133/256` bytes per
//!   parameter. GEMMs run at the 16-bit rate (Marlin dequantises in registers), with the
//!   compute term raised by [`INT4_DEQUANT_OVERHEAD`] (an estimate).
//!
//! vLLM refuses a quantisation on a GPU below its minimum compute capability
//! (`get_min_capability()`: fp8 80, AWQ 75, GPTQ 60); [`Quantization::check_gpu`] does the same.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;

/// Element type of the KV cache (vLLM's KV cache dtype option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum KvCacheDtype {
    /// The model's dtype.
    #[default]
    Auto,
    /// One byte per element (e4m3).
    #[cfg_attr(feature = "clap", value(alias = "fp8_e4m3"))]
    Fp8,
}

impl KvCacheDtype {
    /// The values files and flags accept.
    pub const NAMES: &'static str = "auto, fp8, fp8_e4m3";

    /// Parses `auto`, `fp8` or `fp8_e4m3` (vLLM's names; `fp8_e5m2` is refused by
    /// [`KvCacheDtype::parse_checked`]'s message).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Some(KvCacheDtype::Auto),
            "fp8" | "fp8_e4m3" => Some(KvCacheDtype::Fp8),
            _ => None,
        }
    }

    /// [`KvCacheDtype::parse`] with the reason for a refusal.
    pub fn parse_checked(s: &str) -> Result<Self, String> {
        Self::parse(s).ok_or_else(|| {
            if s.eq_ignore_ascii_case("fp8_e5m2") {
                "fp8_e5m2 is not modelled; use fp8 (e4m3) or auto".to_string()
            } else {
                format!("must be one of {}", Self::NAMES)
            }
        })
    }

    /// The name in files and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Fp8 => "fp8",
        }
    }

    /// Bytes of one K or V element of a model served in `dtype`.
    pub const fn bytes(self, dtype: DType) -> u64 {
        match self {
            KvCacheDtype::Auto => dtype.bytes(),
            KvCacheDtype::Fp8 => 1,
        }
    }

    /// True for `auto`.
    pub fn is_auto(&self) -> bool {
        *self == KvCacheDtype::Auto
    }
}

impl std::fmt::Display for KvCacheDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Weight quantisation (vLLM's quantization option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Quantization {
    /// 8-bit float weights (fp8 tensor cores on compute capability 8.9+, else weight-only).
    Fp8,
    /// AWQ 4-bit weights, group 128.
    Awq,
    /// GPTQ 4-bit weights, group 128.
    Gptq,
}

/// Compute term of a 4-bit GEMM over that of its 16-bit twin: 1.10, an ESTIMATE (not measured
/// here) of what dequantising the weights in the GEMM's main loop costs when the GEMM is
/// compute-bound. Marlin (Frantar et al., 2024) reaches close to fp16 throughput at large
/// batches but not above it; memory-bound GEMMs are unaffected (their time is the weight
/// bytes).
pub const INT4_DEQUANT_OVERHEAD: f64 = 1.10;

/// Bytes of a 4-bit group-128 weight per 256 parameters: 128 (4 bits each) plus 2 groups of a
/// 16-bit scale (2 bytes) and a 4-bit zero point (0.5 bytes): `0.5 + 2.5/128 = 133/256` bytes
/// per parameter.
pub const INT4_G128_BYTES_PER_256: u64 = 133;

impl Quantization {
    /// The values files and flags accept.
    pub const NAMES: &'static str = "fp8, awq, gptq";

    /// Parses `fp8`, `awq`, `gptq` (`none` is the unquantised model, `None`).
    pub fn parse(s: &str) -> Option<Option<Self>> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(None),
            "fp8" => Some(Some(Quantization::Fp8)),
            "awq" => Some(Some(Quantization::Awq)),
            "gptq" => Some(Some(Quantization::Gptq)),
            _ => None,
        }
    }

    /// The name in files and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Quantization::Fp8 => "fp8",
            Quantization::Awq => "awq",
            Quantization::Gptq => "gptq",
        }
    }

    /// vLLM's minimum compute capability for the method (`get_min_capability()` of
    /// `Fp8Config`, `AWQConfig`, `GPTQConfig`: 80, 75, 60).
    pub const fn min_capability(self) -> f64 {
        match self {
            Quantization::Fp8 => 8.0,
            Quantization::Awq => 7.5,
            Quantization::Gptq => 6.0,
        }
    }

    /// The weight format the quantised linear layers' GEMMs run with.
    pub const fn weights(self) -> WeightFormat {
        match self {
            Quantization::Fp8 => WeightFormat::Fp8,
            Quantization::Awq | Quantization::Gptq => WeightFormat::Int4G128,
        }
    }

    /// Bytes of `params` quantised parameters (rounded up).
    pub fn bytes(self, params: u64) -> u64 {
        self.weights().bytes(params, DType::Fp16)
    }

    /// `Err(reason)` when a GPU of `capability` (major.minor as a number, `None`: not recorded)
    /// cannot run the method, as vLLM refuses it.
    pub fn check_gpu(self, gpu: &str, capability: Option<f64>) -> Result<(), String> {
        let Some(cc) = capability else {
            return Err(format!(
                "{} needs compute capability >= {:.1}, and the profile of {gpu} records none \
                 (add gpu.compute_capability to it)",
                self.as_str(),
                self.min_capability()
            ));
        };
        if cc + 1e-9 < self.min_capability() {
            return Err(format!(
                "{} needs compute capability >= {:.1} (vLLM's minimum); {gpu} has {cc:.1}",
                self.as_str(),
                self.min_capability()
            ));
        }
        Ok(())
    }
}

impl std::fmt::Display for Quantization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads a name through `parse`, refusing others with a message naming `field`.
fn de_named<'de, D, T>(
    d: D,
    field: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let s = String::deserialize(d)?;
    parse(&s).map_err(|why| serde::de::Error::custom(format!("{field}: {why} (got {s:?})")))
}

impl<'de> Deserialize<'de> for KvCacheDtype {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        de_named(d, "kv_cache_dtype", KvCacheDtype::parse_checked)
    }
}

impl<'de> Deserialize<'de> for Quantization {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        de_named(d, "quantization", |s| match Quantization::parse(s) {
            Some(Some(q)) => Ok(q),
            _ => Err(format!("must be one of {}", Quantization::NAMES)),
        })
    }
}

/// How a GEMM's weight operand (`[k, n]`) is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightFormat {
    /// In the GEMM's dtype.
    #[default]
    Dense,
    /// One byte per weight; fp8 tensor rate where the GPU has one.
    Fp8,
    /// 4 bits per weight, a 16-bit scale and 4-bit zero per 128 ([`INT4_G128_BYTES_PER_256`]).
    Int4G128,
}

impl WeightFormat {
    /// True for [`WeightFormat::Dense`].
    pub fn is_dense(&self) -> bool {
        *self == WeightFormat::Dense
    }

    /// Bytes of `elems` weights of a GEMM in `dtype` (rounded up).
    pub const fn bytes(self, elems: u64, dtype: DType) -> u64 {
        match self {
            WeightFormat::Dense => elems * dtype.bytes(),
            WeightFormat::Fp8 => elems,
            WeightFormat::Int4G128 => (elems * INT4_G128_BYTES_PER_256).div_ceil(256),
        }
    }

    /// Bytes per weight as a float (for the cost model).
    pub fn bytes_per_elem(self, dtype: DType) -> f64 {
        match self {
            WeightFormat::Dense => dtype.bytes() as f64,
            WeightFormat::Fp8 => 1.0,
            WeightFormat::Int4G128 => INT4_G128_BYTES_PER_256 as f64 / 256.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for q in [Quantization::Fp8, Quantization::Awq, Quantization::Gptq] {
            assert_eq!(Quantization::parse(q.as_str()), Some(Some(q)));
        }
        for k in [KvCacheDtype::Auto, KvCacheDtype::Fp8] {
            assert_eq!(KvCacheDtype::parse(k.as_str()), Some(k));
        }
        assert!(KvCacheDtype::parse_checked("fp8_e5m2").is_err());
        assert!(KvCacheDtype::parse_checked("int8").is_err());
    }

    #[test]
    fn int4_bytes_are_133_per_256() {
        assert_eq!(WeightFormat::Int4G128.bytes(256, DType::Bf16), 133);
        assert_eq!(Quantization::Awq.bytes(1 << 20), (1 << 20) * 133 / 256);
        assert_eq!(Quantization::Fp8.bytes(1000), 1000);
    }

    #[test]
    fn capability_checks_follow_vllm_minimums() {
        assert!(Quantization::Fp8.check_gpu("t4", Some(7.5)).is_err());
        assert!(Quantization::Fp8.check_gpu("a100", Some(8.0)).is_ok());
        assert!(Quantization::Awq.check_gpu("t4", Some(7.5)).is_ok());
        assert!(Quantization::Awq.check_gpu("v100", Some(7.0)).is_err());
        assert!(Quantization::Gptq.check_gpu("v100", Some(7.0)).is_ok());
        assert!(Quantization::Gptq.check_gpu("x", None).is_err());
    }
}
