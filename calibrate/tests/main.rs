//! kvplan-calibrate's integration tests: one binary, one module per area (`cargo test -p kvplan-calibrate`;
//! one area: `cargo test -p kvplan-calibrate --test calibrate <module>::`).

mod attention_table;
mod copy_chains;
mod from_runs;
mod kernels_section;
mod measured_tables;
mod measuring;
mod runahead_chunks;
