//! kvplan-sim's integration tests: one binary, one module per area (`cargo test -p kvplan-sim`;
//! one area: `cargo test -p kvplan-sim --test sim <module>::`).

#[path = "../../tests/support/props.rs"]
mod props;

mod engine_props;
mod host;
mod mutants;
