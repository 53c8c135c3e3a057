//! A regression suite's goldens rewritten: each case run and its outputs written under
//! `golden/`, the same bytes the repository's own suite (regress/) keeps.

use std::fs;
use std::path::Path;

use kvplan_diff::suite::{Case, discover};
use kvplan_report::Error;
use kvplan_report::diff::regress_update;

use crate::TempDir;

fn run(c: &Case) -> Result<kvplan_diff::suite::Outputs, Error> {
    c.run().map_err(|e| Error::Failure(e.to_string()))
}

#[test]
fn goldens_are_written_per_case_and_listed() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../regress");
    let dir = TempDir::new("goldens");
    let case = "opt-1.3b-kvpr";
    fs::copy(
        repo.join(format!("{case}.toml")),
        dir.path().join(format!("{case}.toml")),
    )
    .unwrap();
    let cases = discover(dir.path()).unwrap();
    let out = regress_update(dir.path(), &cases, run).unwrap();
    let first = format!("regress update: {} (1 cases)", dir.path().display());
    assert_eq!(out.lines().next(), Some(first.as_str()), "{out}");
    let written = format!("golden/{case}.json, golden/{case}.timeline.csv");
    assert!(out.contains(case) && out.contains(&written), "{out}");
    for file in [format!("{case}.json"), format!("{case}.timeline.csv")] {
        let got = fs::read_to_string(dir.path().join("golden").join(&file)).unwrap();
        let want = fs::read_to_string(repo.join("golden").join(&file)).unwrap();
        assert!(got == want, "{file} differs from regress/golden/{file}");
    }
}

#[test]
fn a_case_that_fails_stops_the_update_and_a_golden_dir_that_cannot_be_made_is_bad_input() {
    let dir = TempDir::new("goldens-fail");
    // The first case that fails (`a` has no hardware) stops the update: nothing is written.
    fs::write(dir.path().join("a.toml"), "model = \"opt-125m\"\n").unwrap();
    fs::write(dir.path().join("b.toml"), "model = \"no-such-model\"\n").unwrap();
    let cases = discover(dir.path()).unwrap();
    let e = regress_update(dir.path(), &cases, run).unwrap_err();
    assert!(
        e.message().starts_with("case a: hardware is required"),
        "{e}"
    );
    let golden = dir.path().join("golden");
    assert_eq!(fs::read_dir(&golden).unwrap().count(), 0);

    let file = dir.path().join("golden-is-a-file");
    fs::create_dir(&file).unwrap();
    fs::write(file.join("golden"), "").unwrap();
    let e = regress_update(&file, &[], run).unwrap_err();
    assert!(e.is_input() && e.message().contains("cannot create"), "{e}");
}
