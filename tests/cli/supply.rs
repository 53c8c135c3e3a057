//! The supply chain: `cargo deny` over `Cargo.lock` with the repository's `deny.toml`
//! (licences, bans, sources; offline). CI has no `cargo-deny`, so this is ignored there; run it
//! with `cargo test --test cli supply:: -- --ignored` after `cargo install cargo-deny --locked`.
//! The advisories check needs the RustSec database from the network (docs/testing.md).

use std::process::Command;

use crate::common::root;

#[test]
#[ignore = "needs cargo-deny (cargo install cargo-deny --locked); CI has none"]
fn cargo_deny_accepts_licences_bans_and_sources() {
    let out = Command::new("cargo")
        .args(["deny", "--offline", "check", "licenses", "bans", "sources"])
        .current_dir(root())
        .output()
        .expect("cargo runs");
    let (summary, detail) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "cargo deny failed: {summary}\n{detail}"
    );
    assert!(
        summary.contains("bans ok, licenses ok, sources ok"),
        "{summary}"
    );
}
