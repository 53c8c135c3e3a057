//! Transformer model shapes: presets and Hugging Face `config.json` import.
//!
//! Every preset is stored as the architecture fields of the model's public `config.json`
//! (`vocab/models/*.json`) and read by the same importer a user's file goes through, so the
//! presets and the importer cannot drift apart.
//!
//! Files: `spec` (the shape and its direct sizes), `config` (Hugging Face `config.json`
//! reading and the checks), `presets` (the embedded presets), `params` (parameter and weight
//! counting), `shard` (tensor- and expert-parallel shapes).

mod config;
mod params;
mod presets;
mod shard;
mod spec;

pub use presets::{PRESETS, PUBLISHED_PARAMS};
pub use spec::{Family, LayerFfn, LayerWeights, ModelSpec, Moe};

#[cfg(test)]
mod tests;
