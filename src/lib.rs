//! The `kvplan` command line as a library: its arguments ([`Cli`]), its commands ([`run`]: load
//! the input, call the libraries, render the answer) and the wording of its messages (library
//! errors name scenario fields; [`messages`] words them as this command line's flags). The
//! binary (`src/main.rs`) parses, runs and prints; a test or another front end may call [`run`]
//! with its own [`Cli`], after registering its own strategies
//! ([`kvplan_planner::registry::register`]).
#![forbid(unsafe_code)]
// The arguments' doc comments are their `--help` text (`[default: 64]`, `zipf:LO:HI[:THETA]`),
// not links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::bare_urls)]

pub mod args;
pub mod commands;
pub mod error;
pub mod messages;

pub use commands::{Cli, run};
