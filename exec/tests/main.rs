//! kvplan-exec's integration tests: one binary, one module per area. CUDA tests are
//! `#[ignore = "needs a CUDA GPU"]`; run them on a GPU machine with `cargo test -- --ignored`.

mod it;
