//! kvplan-serve's integration tests: one binary, one module per area (`cargo test -p kvplan-serve`;
//! one area: `cargo test -p kvplan-serve --test serve <module>::`).

#[path = "../../tests/support/props.rs"]
mod props;

mod autoscale;
mod capacity;
mod cluster;
mod deploy;
mod fastforward;
mod host;
mod invariants;
mod quant;
mod real_vllm;
mod roofline;
mod serve;
mod stream;
mod tier;
mod v1;
mod versions;
mod warmup;
