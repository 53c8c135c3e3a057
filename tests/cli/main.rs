//! End-to-end tests of the `kvplan` binary and cross-crate checks: one test binary (one link
//! step), a module per concern.

mod common;
mod contract;
mod csv_plain;
mod determinism;
mod errors;
mod fuzz;
mod inputs;
mod library;
mod measure;
mod memory;
mod no_answer;
mod output;
mod plot;
mod readme;
mod regress;
mod safety;
mod scenarios;
mod serve;
mod settings;
mod supply;
mod sweep;
mod sweep_resume;
mod validate_serving;
