//! Element types of weights, activations and the KV cache.

use serde::{Deserialize, Serialize};

/// A numeric element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    Fp32,
}

impl DType {
    /// Number of element types.
    pub const COUNT: usize = 3;

    /// Every element type, in [`DType::index`] order: per-dtype tables are `[T; DType::COUNT]`
    /// indexed by [`DType::index`].
    pub const ALL: [DType; DType::COUNT] = [DType::Fp16, DType::Bf16, DType::Fp32];

    /// Position of `self` in [`DType::ALL`].
    pub const fn index(self) -> usize {
        match self {
            DType::Fp16 => 0,
            DType::Bf16 => 1,
            DType::Fp32 => 2,
        }
    }

    /// Bytes per element.
    pub const fn bytes(self) -> u64 {
        match self {
            DType::Fp16 | DType::Bf16 => 2,
            DType::Fp32 => 4,
        }
    }

    /// The lowercase name used in files and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            DType::Fp16 => "fp16",
            DType::Bf16 => "bf16",
            DType::Fp32 => "fp32",
        }
    }

    /// Parses `fp16`/`float16`/`half`, `bf16`/`bfloat16`, `fp32`/`float32`/`float`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "fp16" | "float16" | "half" | "f16" => Some(DType::Fp16),
            "bf16" | "bfloat16" => Some(DType::Bf16),
            "fp32" | "float32" | "float" | "f32" => Some(DType::Fp32),
            _ => None,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_the_position_in_all() {
        for (i, d) in DType::ALL.into_iter().enumerate() {
            assert_eq!(d.index(), i, "{d}");
            assert_eq!(DType::parse(d.as_str()), Some(d));
        }
    }
}
