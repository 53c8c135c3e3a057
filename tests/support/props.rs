//! The one proptest configuration of the workspace's property tests, included by each crate's
//! test binary (`#[path = "../../tests/support/props.rs"] mod props;`): every property test
//! runs a stated number of cases from a fixed seed, so CI checks the same cases on every run and
//! a failure reproduces. `docs/testing.md` says how to run them otherwise:
//! - `PROPTEST_RNG_SEED=<u64>`: another fixed seed;
//! - `PROPTEST_RNG_SEED=random`: a new seed each run (proptest's own reading of the variable may
//!   warn that `random` is not a number; this helper reads it); a failure is saved to the test's
//!   `<test file>.proptest-regressions` file beside it (commit it) and replayed first from then
//!   on;
//! - `PROPTEST_CASES=<n>`: `n` cases for every property test instead of each test's own count.

use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

/// The seed every property test starts from unless `PROPTEST_RNG_SEED` says otherwise.
pub const SEED: u64 = 0x6b76_706c_616e; // "kvplan"

/// `cases` cases from [`SEED`], as the environment variables above override.
pub fn config(cases: u32) -> Config {
    config_from(
        cases,
        std::env::var("PROPTEST_CASES").ok().as_deref(),
        std::env::var("PROPTEST_RNG_SEED").ok().as_deref(),
    )
}

/// [`config`] given the two variables' values.
pub fn config_from(cases: u32, cases_var: Option<&str>, seed_var: Option<&str>) -> Config {
    let cases = cases_var
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(cases);
    let rng_seed = match seed_var.map(str::trim) {
        Some("random") => RngSeed::Random,
        Some(v) => RngSeed::Fixed(v.parse().unwrap_or(SEED)),
        None => RngSeed::Fixed(SEED),
    };
    Config {
        cases,
        rng_seed,
        // Failures beside the test file (`tests/serve.proptest-regressions`), replayed first on
        // every run. Proptest's default looks for the directory holding `main.rs`, which is each
        // crate's `tests/` (its one test binary), and would read `proptest-regressions/*.txt`
        // instead, never the committed files.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

#[test]
fn property_tests_are_seeded_unless_asked() {
    let c = config_from(48, None, None);
    assert_eq!((c.cases, c.rng_seed), (48, RngSeed::Fixed(SEED)));
    let c = config_from(48, Some("1000"), Some("7"));
    assert_eq!((c.cases, c.rng_seed), (1000, RngSeed::Fixed(7)));
    let c = config_from(48, None, Some("random"));
    assert_eq!((c.cases, c.rng_seed), (48, RngSeed::Random));
}
