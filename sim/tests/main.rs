//! kvplan-sim's integration tests: one binary, one module per area (`cargo test -p kvplan-sim`;
//! one area: `cargo test -p kvplan-sim --test sim <module>::`).

mod engine_props;
mod host;
