//! The back-to-back copy fit on vLLM 0.4's swap measured on an H200
//! (`calibrate/data/host_costs/swap_blocks_h200.csv`): the numbers the profiles carry for the
//! split of a copy's latency and for vLLM 0.4's issue rate come out of it.

use kvplan_calibrate::copies::{fit_chains, read_chains};
use kvplan_vocab::HardwareProfile;
use kvplan_vocab::hardware::DEFAULT_COPY_COMPLETION_US;
use kvplan_vocab::host::Implementation;

#[test]
fn the_h200_swap_table_separates_setup_from_completion() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/host_costs/swap_blocks_h200.csv"
    );
    let rows = read_chains(&std::fs::read_to_string(path).unwrap(), path).unwrap();
    assert_eq!(rows.len(), 32);
    let f = fit_chains(&rows).unwrap();
    println!(
        "issue {:.2} us, setup {:.2} us, {:.1} GB/s over {} device-bound rows",
        f.issue_s * 1e6,
        f.setup_s * 1e6,
        f.bandwidth / 1e9,
        f.device_rows
    );
    // Seen: issue 2.46 us, setup 2.27 us, 55.2 GB/s over 16 rows (blocks of 8-128 tokens).
    assert!((2.0e-6..2.6e-6).contains(&f.setup_s), "{f:?}");
    assert!((50e9..60e9).contains(&f.bandwidth), "{f:?}");
    assert_eq!(f.device_rows, 16);
    // vLLM 0.4's issue time is this table's.
    let v0 = Implementation::VllmV0.profile().copy_issue_us * 1e-6;
    assert!((v0 / f.issue_s - 1.0).abs() < 0.01, "{v0} vs {}", f.issue_s);
    // The calibrated profile's single-copy latency (each copy timed alone, 4.5-4.6 us) less the
    // setup is the completion a chain pays once: the default `copy_completion_us`.
    let hw = HardwareProfile::resolve(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/profiles/h200-kvplan-exec.toml"
    ))
    .unwrap();
    for latency in [hw.link.h2d_latency_s, hw.link.d2h_latency_s] {
        let completion = latency - f.setup_s;
        assert!(
            (completion * 1e6 - DEFAULT_COPY_COMPLETION_US).abs() < 0.15,
            "{completion}"
        );
    }
    assert_eq!(hw.link.copy_completion_s, DEFAULT_COPY_COMPLETION_US * 1e-6);
}
