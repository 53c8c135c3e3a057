//! kvplan-vocab's integration tests: one binary, one module per area (`cargo test -p kvplan-vocab`;
//! one area: `cargo test -p kvplan-vocab --test vocab <module>::`).

mod attention_batch;
mod kernel_model;
mod moe;
mod presets;
mod quant;
