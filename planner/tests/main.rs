//! kvplan-planner's integration tests: one binary, one module per area (`cargo test -p kvplan-planner`;
//! one area: `cargo test -p kvplan-planner --test planner <module>::`).

#[path = "../../tests/support/props.rs"]
mod props;

mod headinfer;
mod kvpr_vs_simulator;
mod module_graph;
mod published;
mod report_adds_up;
mod run;
mod runahead;
mod split_props;
