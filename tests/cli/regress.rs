//! `kvplan diff` and `kvplan regress`: the repository's own suite passes, injected regressions
//! are caught, improvements and identical inputs are not, and bad inputs get one line and exit 2.

use std::path::Path;
use std::process::Output;

use crate::common::{TempDir, ok, root, run, run_in};

fn code(out: &Output) -> i32 {
    out.status.code().expect("kvplan exited")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Exit code 2 and a single `error: ` line on stderr.
fn one_line_input_error(out: &Output) -> String {
    let e = stderr(out);
    assert_eq!(code(out), 2, "stderr: {e}\nstdout: {}", stdout(out));
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("error: "), "{e}");
    e
}

/// A copy of the repository's `regress/` in `dir` (the serving case's trace path made absolute).
fn copy_suite(dir: &Path) {
    let src = root().join("regress");
    std::fs::create_dir_all(dir.join("golden")).unwrap();
    for sub in ["", "golden"] {
        for f in std::fs::read_dir(src.join(sub)).unwrap() {
            let f = f.unwrap().path();
            if f.is_file() {
                std::fs::copy(&f, dir.join(sub).join(f.file_name().unwrap())).unwrap();
            }
        }
    }
    let serve = dir.join("llama-2-7b-serve.toml");
    let trace = root().join("data/traces/splitwise_conv.csv");
    let text = std::fs::read_to_string(&serve).unwrap().replace(
        "\"../data/traces/splitwise_conv.csv\"",
        &format!("{:?}", trace.display().to_string()),
    );
    std::fs::write(&serve, text).unwrap();
}

#[test]
fn the_repository_suite_passes() {
    let out = ok(&run(&["regress", "check", "regress"]));
    for case in [
        "opt-1.3b-kvpr",
        "llama-3-8b-headinfer",
        "llama-2-7b-runahead",
        "llama-2-7b-serve",
        "opt-1.3b-t4-split",
        "llama-2-7b-headinfer-groups",
        "llama-2-7b-serve-prefix",
    ] {
        assert!(out.contains(case), "{out}");
    }
    assert!(!out.contains("REGRESSED"), "{out}");
    assert!(!out.contains("DECISION"), "{out}");
}

/// Every golden in `regress/golden/` is what its scenario prints today, byte for byte: `regress
/// update` on a copy of the suite rewrites each golden, and none may differ, appear or vanish.
/// (The one golden mechanism of the repository; a change of output is reviewed as the diff of
/// `kvplan regress update regress`.)
#[test]
fn goldens_are_what_the_commands_print() {
    let dir = TempDir::new("regress-goldens");
    let suite = dir.path().join("suite");
    copy_suite(&suite);
    ok(&run(&["regress", "update", suite.to_str().unwrap()]));
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let want_dir = root().join("regress/golden");
    let got_dir = suite.join("golden");
    assert_eq!(names(&got_dir), names(&want_dir));
    for f in names(&want_dir) {
        let (want, got) = (
            std::fs::read_to_string(want_dir.join(&f)).unwrap(),
            std::fs::read_to_string(got_dir.join(&f)).unwrap(),
        );
        assert!(
            want == got,
            "regress/golden/{f} is not what its scenario prints now"
        );
    }
    // The KVPR goldens pin recomputation, not only plain transfer; the column case pins the
    // column-by-column order with offloaded weights.
    let json = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(want_dir.join(f)).unwrap()).unwrap()
    };
    assert!(
        json("opt-1.3b-kvpr.json")["mean_recompute_fraction"]
            .as_f64()
            .unwrap()
            > 0.1
    );
    let column = json("opt-1.3b-t4-column.json");
    assert_eq!(column["order"], "column-by-column");
    assert_eq!(column["weights_on_gpu"], false);
    // Goldens that pin decisions away from their extremes: a KVPR split strictly between
    // "transfer everything" and "recompute everything" at every step, HeadInfer head groups
    // neither all of a layer's KV heads nor one, and a serving run that both preempts and hits
    // its prefix cache.
    let splits = json("opt-1.3b-t4-split.decisions.json");
    let splits = splits["splits"].as_array().unwrap();
    assert!(!splits.is_empty());
    for s in splits {
        let (l, n) = (
            s["recompute_tokens"].as_u64().unwrap(),
            s["seq_len"].as_u64().unwrap(),
        );
        assert!(l > n / 4 && l < n * 3 / 4, "split {l} of {n}");
    }
    let groups = json("llama-2-7b-headinfer-groups.decisions.json");
    assert_eq!(groups["headinfer"]["heads_per_group"], 16);
    assert_eq!(groups["headinfer"]["groups_per_layer"], 2);
    let serve = json("llama-2-7b-serve-prefix.json");
    assert!(serve["preemptions"].as_u64().unwrap() > 0);
    let hit = serve["prefix_cache_hit_rate"].as_f64().unwrap();
    assert!(hit > 0.1 && hit < 0.9, "{hit}");
    let runahead = json("llama-2-7b-runahead.decisions.json");
    assert_eq!(
        runahead["runahead"]["partition"].as_array().unwrap().len(),
        3
    );
}

/// A decision forced away from the golden's: regress fails on the changed split whatever the
/// tolerance (a wide one lets the timing changes through, not the decision), and passes when
/// `--accept` names every changed decision.
#[test]
fn regress_fails_on_a_changed_decision_unless_accepted() {
    let tmp = TempDir::new("regress-decision");
    let dir = tmp.path();
    copy_suite(dir);
    let d = dir.to_str().unwrap();
    // The planner chose 121, 124, 124 recomputed tokens; force 123 at every step.
    let case = dir.join("opt-1.3b-t4-split.toml");
    let text = std::fs::read_to_string(&case).unwrap();
    assert!(text.contains("split = \"auto\""), "{text}");
    std::fs::write(&case, text.replace("split = \"auto\"", "split = 123")).unwrap();
    let check = |extra: &[&str]| {
        let mut args = vec!["regress", "check", d, "--tolerance", "50%"];
        args.extend(extra);
        run(&args)
    };
    let out = check(&[]);
    assert_eq!(code(&out), 1, "{}\n{}", stdout(&out), stderr(&out));
    let (table, e) = (stdout(&out), stderr(&out));
    assert!(!table.contains("REGRESSED"), "{table}");
    for line in [
        "opt-1.3b-t4-split: splits.0.recompute_tokens 121 -> 123 (+1.65%) DECISION CHANGED",
        "opt-1.3b-t4-split: splits.1.recompute_tokens 124 -> 123 (-0.81%) DECISION CHANGED",
    ] {
        assert!(table.lines().any(|l| l == line), "{line}\n{table}");
    }
    assert!(
        table.contains("opt-1.3b-t4-split: mean_recompute_fraction"),
        "{table}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("1 of 8 cases failed: opt-1.3b-t4-split (4 decisions changed: ")
            && e.contains("--accept METRIC"),
        "{e}"
    );
    // Accepting the split alone leaves the recompute share failing.
    let out = check(&["--accept", "splits.*.recompute_tokens"]);
    assert_eq!(code(&out), 1, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("1 decision changed: mean_recompute_fraction"));
    // Both named (one by a dotted prefix): it passes, the changes listed as accepted.
    let out = check(&["--accept", "splits", "--accept", "mean_recompute_fraction"]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("splits.0.recompute_tokens 121 -> 123 (+1.65%) accepted"),
        "{}",
        stdout(&out)
    );
    // The same output compared with `diff`: the decisions golden fails it too.
    let golden = root().join("regress/golden/opt-1.3b-t4-split.decisions.json");
    let fresh = dir.join("fresh.decisions.json");
    ok(&run(&["regress", "update", d]));
    std::fs::copy(dir.join("golden/opt-1.3b-t4-split.decisions.json"), &fresh).unwrap();
    let g = golden.to_str().unwrap();
    let f = fresh.to_str().unwrap();
    let out = run(&["diff", g, f, "--tolerance", "50%"]);
    assert_eq!(code(&out), 1, "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("3 decisions changed"),
        "{}",
        stderr(&out)
    );
    ok(&run(&[
        "diff",
        g,
        f,
        "--tolerance",
        "50%",
        "--accept",
        "splits",
    ]));
}

/// The report JSON with `decode_latency_s` and `decode_throughput_tok_s` scaled.
fn scaled_report(latency: f64, throughput: f64) -> String {
    let text = std::fs::read_to_string(root().join("regress/golden/opt-1.3b-kvpr.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (k, f) in [
        ("decode_latency_s", latency),
        ("decode_throughput_tok_s", throughput),
    ] {
        v[k] = serde_json::json!(v[k].as_f64().unwrap() * f);
    }
    serde_json::to_string_pretty(&v).unwrap()
}

#[test]
fn diff_exits_1_on_a_2pct_regression_and_0_otherwise() {
    let dir = TempDir::new("diff-json");
    let a = root().join("regress/golden/opt-1.3b-kvpr.json");
    let a = a.to_str().unwrap();
    let write = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    // Identical.
    let out = run(&["diff", a, a]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("0 regressed"), "{}", stdout(&out));
    // 2% slower: exit 1, the metric named on stderr, the table still on stdout.
    let worse = write("worse.json", scaled_report(1.02, 1.0));
    let out = run(&["diff", a, &worse]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("decode_latency_s +2.00%"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("REGRESSED"), "{}", stdout(&out));
    // ... but within a 3% tolerance.
    assert_eq!(code(&run(&["diff", a, &worse, "--tolerance", "0.03"])), 0);
    // Throughput 2% lower is a regression too.
    let slower = write("slower.json", scaled_report(1.0, 0.98));
    let out = run(&["diff", a, &slower, "--format", "json"]);
    assert_eq!(code(&out), 1);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["regressed"], 1);
    // 2% better on both: exit 0, both improved.
    let better = write("better.json", scaled_report(0.98, 1.02));
    let out = run(&["diff", a, &better, "--format", "csv"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let csv = stdout(&out);
    assert!(
        csv.contains(",decode_latency_s,") && csv.matches(",improved").count() == 2,
        "{csv}"
    );
}

#[test]
fn diff_matches_csv_rows_by_key() {
    let dir = TempDir::new("diff-csv");
    let a = dir.path().join("a.csv");
    let table = ok(&run(&[
        "simulate",
        "--model",
        "opt-1.3b",
        "--hardware",
        "a100-40g-pcie4",
        "--batch",
        "8",
        "--prompt",
        "64",
        "--gen",
        "3",
        "--compare",
        "--format",
        "csv",
    ]));
    std::fs::write(&a, &table).unwrap();
    // B: rows reversed, the kvpr row's decode latency 2% higher.
    let mut lines: Vec<String> = table.lines().map(String::from).collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "decode_latency_s")
        .unwrap();
    let kvpr = lines.iter().position(|l| l.starts_with("kvpr,")).unwrap();
    let mut cells: Vec<String> = lines[kvpr].split(',').map(String::from).collect();
    cells[col] = (cells[col].parse::<f64>().unwrap() * 1.02).to_string();
    lines[kvpr] = cells.join(",");
    lines[1..].reverse();
    let b = dir.path().join("b.csv");
    std::fs::write(&b, lines.join("\n") + "\n").unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    assert_eq!(code(&run(&["diff", a, a])), 0);
    let out = run(&["diff", a, b]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("kvpr/opt-1.3b/") && e.contains("decode_latency_s +2.00%"),
        "{e}"
    );
    // A row that is only in one file is named, exit 2.
    let c = dir.path().join("c.csv");
    std::fs::write(&c, table.replace("\nkvpr,", "\nkvpr-x,")).unwrap();
    let e = one_line_input_error(&run(&["diff", a, c.to_str().unwrap()]));
    assert!(e.contains("only in") && e.contains("'kvpr/opt-1.3b"), "{e}");
    assert!(e.contains("'kvpr-x/opt-1.3b"), "{e}");
}

#[test]
fn timeline_breakdown_sums_match_the_csv() {
    let path = root().join("regress/golden/opt-1.3b-kvpr.timeline.csv");
    let p = path.to_str().unwrap();
    let out = ok(&run(&["diff", p, p, "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "timeline");
    let metric = |name: &str| -> f64 {
        v["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["row"] == "kvpr" && m["metric"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))["a"]
            .as_f64()
            .unwrap()
    };
    // Sum the CSV by hand.
    let text = std::fs::read_to_string(&path).unwrap();
    let (mut by_label, mut by_cat) = (
        std::collections::BTreeMap::<String, f64>::new(),
        std::collections::BTreeMap::<String, f64>::new(),
    );
    let (mut total, mut end, mut ops) = (0.0, 0.0f64, 0.0);
    for line in text.lines().skip(1) {
        let c: Vec<&str> = line.split(',').collect();
        let d: f64 = c[13].parse().unwrap();
        *by_label.entry(c[4].into()).or_default() += d;
        *by_cat.entry(c[5].into()).or_default() += d;
        total += d;
        end = end.max(c[12].parse().unwrap());
        ops += 1.0;
    }
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * y.abs().max(1.0);
    for (label, d) in &by_label {
        assert!(
            close(metric(&format!("label.{label}.duration_s")), *d),
            "{label}"
        );
    }
    for (cat, d) in &by_cat {
        assert!(
            close(metric(&format!("category.{cat}.duration_s")), *d),
            "{cat}"
        );
    }
    let label_sum: f64 = by_label
        .keys()
        .map(|l| metric(&format!("label.{l}.duration_s")))
        .sum();
    let cat_sum: f64 = by_cat
        .keys()
        .map(|c| metric(&format!("category.{c}.duration_s")))
        .sum();
    assert!(close(label_sum, total) && close(cat_sum, total));
    assert!(close(metric("makespan_s"), end));
    assert_eq!(metric("ops"), ops);
}

#[test]
fn regress_catches_a_slower_link() {
    let tmp = TempDir::new("regress-link");
    let dir = tmp.path();
    copy_suite(dir);
    assert_eq!(code(&run(&["regress", "check", dir.to_str().unwrap()])), 0);
    // The preset's pinned host-to-device bandwidth 5% lower, through a profile override next
    // to the cases (a file without `model`, so not a case itself).
    let gbps = ok(&run(&["hardware", "a100-40g-pcie4", "--format", "csv"]));
    let (h, r) = (gbps.lines().next().unwrap(), gbps.lines().nth(1).unwrap());
    let col = h.split(',').position(|c| c == "h2d_pinned_gbps").unwrap();
    let base: f64 = r.split(',').nth(col).unwrap().parse().unwrap();
    std::fs::write(
        dir.join("slow-link.toml"),
        format!(
            "base = \"a100-40g-pcie4\"\n[link]\nh2d_pinned_gbps = {}\n",
            base * 0.95
        ),
    )
    .unwrap();
    let case = dir.join("opt-1.3b-kvpr.toml");
    let text = std::fs::read_to_string(&case).unwrap().replace(
        "hardware = \"a100-40g-pcie4\"",
        "hardware = \"slow-link.toml\"",
    );
    std::fs::write(&case, text).unwrap();
    let out = run(&["regress", "check", dir.to_str().unwrap()]);
    assert_eq!(code(&out), 1, "{}\n{}", stdout(&out), stderr(&out));
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("1 of 8 cases failed: opt-1.3b-kvpr"), "{e}");
    let table = stdout(&out);
    assert!(
        table.contains("opt-1.3b-kvpr: decode_latency_s") && table.contains("REGRESSED"),
        "{table}"
    );
    // A wider tolerance lets it through (idle time moves most: +16%).
    let out = run(&[
        "regress",
        "check",
        dir.to_str().unwrap(),
        "--tolerance",
        "20%",
    ]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
}

#[test]
fn a_missing_golden_names_regress_update_which_writes_it() {
    let tmp = TempDir::new("regress-missing");
    let dir = tmp.path();
    copy_suite(dir);
    std::fs::remove_file(dir.join("golden/llama-3-8b-headinfer.timeline.csv")).unwrap();
    let d = dir.to_str().unwrap();
    let out = run(&["regress", "check", d]);
    assert_eq!(code(&out), 1);
    let e = stderr(&out);
    assert!(e.contains("llama-3-8b-headinfer (golden missing)"), "{e}");
    assert!(e.contains(&format!("kvplan regress update {d}")), "{e}");
    ok(&run(&["regress", "update", d]));
    assert_eq!(
        std::fs::read_to_string(dir.join("golden/llama-3-8b-headinfer.timeline.csv")).unwrap(),
        std::fs::read_to_string(root().join("regress/golden/llama-3-8b-headinfer.timeline.csv"))
            .unwrap()
    );
    assert_eq!(code(&run(&["regress", "check", d])), 0);
}

#[test]
fn bad_inputs_get_one_line_and_exit_2() {
    let tmp = TempDir::new("diff-bad");
    let d = tmp.path();
    let json = root().join("regress/golden/opt-1.3b-kvpr.json");
    let serve = root().join("regress/golden/llama-2-7b-serve.json");
    let timeline = root().join("regress/golden/opt-1.3b-kvpr.timeline.csv");
    std::fs::write(d.join("broken.json"), "{\"decode_latency_s\": ").unwrap();
    std::fs::write(
        d.join("ragged.csv"),
        "strategy,decode_latency_s\nkvpr,1,2\n",
    )
    .unwrap();
    std::fs::write(d.join("plain.txt"), "hello\n").unwrap();
    let p = |f: &str| d.join(f).to_str().unwrap().to_string();
    let (json, serve, timeline) = (
        json.to_str().unwrap(),
        serve.to_str().unwrap(),
        timeline.to_str().unwrap(),
    );
    for (args, needle) in [
        (vec!["diff", json, &p("broken.json")], "malformed JSON"),
        (
            vec!["diff", &p("ragged.csv"), &p("ragged.csv")],
            "ragged.csv:2: malformed CSV",
        ),
        (vec!["diff", &p("plain.txt"), json], "not a kvplan output"),
        (
            vec!["diff", json, serve],
            "cannot compare simulate report JSON",
        ),
        (vec!["diff", json, timeline], "with timeline CSV"),
        (vec!["diff", json, &p("none.json")], "cannot read"),
        (vec!["diff", json, json, "--tolerance", "5"], "--tolerance"),
        (
            vec!["regress", "check", d.to_str().unwrap()],
            "no scenarios",
        ),
    ] {
        let e = one_line_input_error(&run_in(&root(), &args));
        assert!(e.contains(needle), "{args:?}: {e}");
    }
}
