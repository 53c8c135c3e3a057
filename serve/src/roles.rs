//! The words a cluster's outputs share with its driver: a replica's role and how prefill KV
//! reaches a decode replica (a leaf: the outputs name them without importing the driver).

use serde::{Deserialize, Serialize};

/// Most replicas a cluster may have.
pub const MAX_REPLICAS: u32 = 4096;

/// A replica's place in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Serves whole requests.
    Colocated,
    /// Runs prefills and holds their KV until a decode replica has read it.
    Prefill,
    /// Reads prompts' KV from prefill replicas and generates.
    Decode,
}

impl Role {
    /// The name in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Colocated => "colocated",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// How prefill KV reaches a decode replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum KvTransfer {
    /// The decode replica pulls the blocks after the prefill has finished (vLLM's NIXL
    /// connector).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(
            help = "The decode replica reads the blocks once the prefill is done (vLLM's NIXL \
                      connector)"
        )
    )]
    Pull,
    /// The prefill replica pushes each layer's KV as it is computed (DistServe, Mooncake).
    #[cfg_attr(
        feature = "clap",
        value(
            help = "The prefill replica pushes each layer's KV as it computes it (DistServe, \
                      Mooncake)"
        )
    )]
    Layerwise,
}

impl KvTransfer {
    /// The name in files and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            KvTransfer::Pull => "pull",
            KvTransfer::Layerwise => "layerwise",
        }
    }
}
