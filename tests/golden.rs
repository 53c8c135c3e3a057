//! Golden outputs: small runs whose full output is pinned in tests/golden/. They change only on
//! purpose: rerun with `UPDATE_GOLDEN=1 cargo test --test cli golden` and review the diff.

use std::path::Path;

use crate::common::{TempDir, ok, root, run_in};

fn check(name: &str, got: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (create it with UPDATE_GOLDEN=1)", path.display()));
    if want != got {
        let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
        let i = w
            .iter()
            .zip(&g)
            .position(|(a, b)| a != b)
            .unwrap_or(w.len().min(g.len()));
        let show = |v: &[&str]| v[i.saturating_sub(2)..(i + 3).min(v.len())].join("\n");
        panic!(
            "{name} differs from the golden file at line {}:\n--- expected\n{}\n--- got\n{}\n(rerun with UPDATE_GOLDEN=1 if the change is intended)",
            i + 1,
            show(&w),
            show(&g)
        );
    }
}

fn read(dir: &Path, f: &str) -> String {
    std::fs::read_to_string(dir.join(f)).unwrap()
}

#[test]
fn small_kvpr_run_report_and_timeline() {
    let dir = TempDir::new("golden");
    let out = ok(&run_in(
        dir.path(),
        &[
            "simulate",
            "--model",
            "opt-1.3b",
            "--hardware",
            "a100-40g-pcie4",
            "--strategy",
            "kvpr",
            "--batch",
            "32",
            "--prompt",
            "256",
            "--gen",
            "3",
            "--format",
            "json",
            "--trace",
            "timeline.csv",
        ],
    ));
    // This setting recomputes: the golden timeline pins the KVPR ops, not only plain transfer.
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["mean_recompute_fraction"].as_f64().unwrap() > 0.1,
        "{out}"
    );
    check("simulate_opt1.3b_kvpr.json", &out);
    check(
        "timeline_opt1.3b_kvpr.csv",
        &read(dir.path(), "timeline.csv"),
    );
}

#[test]
fn column_plan_with_offloaded_weights() {
    let dir = TempDir::new("golden-col");
    let out = ok(&run_in(
        dir.path(),
        &[
            "plan",
            "kvpr",
            "--model",
            "opt-1.3b",
            "--hardware",
            "t4",
            "--weights",
            "offload",
            "--batch",
            "8",
            "--gpu-batches",
            "4",
            "--prompt",
            "64",
            "--gen",
            "4",
            "--format",
            "json",
        ],
    ));
    check("plan_opt1.3b_t4_column.json", &out);
}
