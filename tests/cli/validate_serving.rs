//! `kvplan validate-serving`: the given stage table and a per-request run, table / CSV / JSON /
//! summary CSV telling the same numbers, as `serve --compare-to` tells them; folders; byte-for-
//! byte repeats; one-line errors naming the file.

use std::collections::BTreeMap;

use crate::common::{TempDir, fails_with, ok, root, run_in};

const TABLE: &str = "data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv";
const RUN: &str = "tests/fixtures/fuzz-vllm-bench-serve.json";

/// A folder `runs/` holding the given stage table (`a.csv`), the per-request run (`b.json`) and
/// a file that is not a measured run (`notes.txt`).
fn runs_dir(name: &str) -> TempDir {
    let d = TempDir::new(name);
    let runs = d.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    std::fs::copy(root().join(TABLE), runs.join("a.csv")).unwrap();
    std::fs::copy(root().join(RUN), runs.join("b.json")).unwrap();
    std::fs::write(runs.join("notes.txt"), "not a run").unwrap();
    d
}

fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn csv_num(s: &str) -> f64 {
    if s.is_empty() {
        f64::NAN
    } else {
        s.parse().unwrap()
    }
}

#[test]
fn stage_table_and_per_request_run_in_every_format() {
    let d = runs_dir("validate-serving");
    let base = ["validate-serving", "--hardware", "h100-sxm"];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend(extra);
        ok(&run_in(d.path(), &a))
    };
    // A folder stands for its *.csv and *.json files by name: the same report, byte for byte, as
    // the files named (two runs, the replays scheduled as they come).
    let json_text = with(&["runs", "--format", "json"]);
    assert_eq!(
        json_text,
        with(&["runs/a.csv", "runs/b.json", "--format", "json"])
    );
    let json: serde_json::Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(
        json["files"],
        serde_json::json!(["runs/a.csv", "runs/b.json"])
    );
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 13);
    assert_eq!(json["skipped"], serde_json::json!([]));

    // The stages' figures are `serve --compare-to`'s, number for number; so are the run's.
    let cmp: serde_json::Value = serde_json::from_str(&ok(&run_in(
        d.path(),
        &["serve", "--compare-to", "runs/a.csv", "--format", "json"],
    )))
    .unwrap();
    for (st, r) in cmp["stages"].as_array().unwrap().iter().zip(runs) {
        assert_eq!(st["name"], r["run"]);
        assert_eq!(r["kind"], "stage");
        for (metric, key, err) in [
            ("ttft_mean_s", "ttft_mean_s", "ttft_error"),
            ("tpot_mean_s", "tpot_s", "tpot_error"),
            ("e2e_mean_s", "e2e_mean_s", "e2e_error"),
            ("requests_per_s", "throughput_rps", "throughput_error"),
        ] {
            let m = r["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["metric"] == metric)
                .unwrap();
            assert_eq!(m["predicted"], st["predicted"][key], "{metric}");
            assert_eq!(m["measured"], st["measured"][key], "{metric}");
            assert_eq!(m["error"], st[err], "{metric}");
        }
        assert_eq!(r["overloaded_predicted"], st["predicted"]["overloaded"]);
        assert_eq!(r["overloaded_measured"], st["measured"]["overloaded"]);
    }
    let one: serde_json::Value = serde_json::from_str(&ok(&run_in(
        d.path(),
        &[
            "serve",
            "--model",
            "llama-2-7b",
            "--hardware",
            "h100-sxm",
            "--compare-to",
            "runs/b.json",
            "--format",
            "json",
        ],
    )))
    .unwrap();
    let last = &runs[12];
    assert_eq!(last["kind"], "requests");
    // The JSON's model_id (meta-llama/Llama-2-7b-hf) stands for --model.
    assert_eq!(last["model"], "llama-2-7b");
    let theirs: Vec<&serde_json::Value> = (one["metrics"].as_array().unwrap().iter())
        .filter(|m| m["metric"] != "served")
        .collect();
    let mine: Vec<&serde_json::Value> = last["metrics"].as_array().unwrap().iter().collect();
    assert_eq!(mine, theirs);
    assert_eq!(
        last["median_request_e2e_error"],
        one["median_request_e2e_error"]
    );

    // The totals: TPOT of the ten stages served (the two overloaded ones out) and the run's;
    // a percentile only the run has; no band yet.
    let all = |metric: &str| {
        json["summary"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["model"].is_null() && g["metric"] == metric)
            .unwrap()
            .clone()
    };
    assert_eq!(all("tpot_mean_s")["count"], 11);
    assert_eq!(all("ttft_p90_s")["count"], 1);
    assert!(all("e2e_mean_s")["band_coverage"].is_null());

    // CSV: one row per run and metric, the JSON's numbers.
    let csv_text = with(&["runs", "--format", "csv"]);
    let mut rdr = csv::Reader::from_reader(csv_text.as_bytes());
    let header = rdr.headers().unwrap().clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let mut rows = rdr.records().map(|r| r.unwrap());
    let mut n = 0;
    for r in runs {
        for m in r["metrics"].as_array().unwrap() {
            let row = rows.next().expect("a CSV row per run and metric");
            n += 1;
            assert_eq!(&row[col("run")], r["run"].as_str().unwrap());
            assert_eq!(&row[col("metric")], m["metric"].as_str().unwrap());
            assert_eq!(&row[col("load")], r["load"].as_str().unwrap());
            for k in ["predicted", "measured", "error"] {
                assert!(same(csv_num(&row[col(k)]), num(&m[k])), "{k}: {row:?}");
            }
        }
    }
    assert!(rows.next().is_none());
    assert_eq!(n, 12 * 4 + 14);

    // The table: its summary rows are the JSON's, rounded; --out writes the summary CSV with
    // the JSON's numbers; --svg the plot.
    let table = with(&["runs", "--out", "summary.csv", "--svg", "fidelity.svg"]);
    assert!(
        table.starts_with(
            "validate-serving: 13 runs from 2 files replayed (12 stages, 1 per-request run)\n"
        ),
        "{table}"
    );
    assert!(table.contains("runs/a.csv: 12 stages replayed with their settings"));
    assert!(table.contains("runs/b.json: a per-request run on llama-2-7b, h100-sxm, TP 1"));
    assert!(table.contains("--out: written to summary.csv\n--svg: written to fidelity.svg\n"));
    let pct = |v: &serde_json::Value, signed: bool| match v.as_f64() {
        Some(x) if signed => format!("{:+.1}%", x * 100.0),
        Some(x) => format!("{:.1}%", x * 100.0),
        None => "—".into(),
    };
    let key = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "all".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let summary = json["summary"].as_array().unwrap();
    let lines: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("model "))
        .skip(2)
        .take(summary.len())
        .collect();
    assert_eq!(lines.len(), summary.len());
    for (g, line) in summary.iter().zip(&lines) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        let want = [
            key(&g["model"]),
            key(&g["gpu"]),
            key(&g["tp"]),
            key(&g["load"]),
            key(&g["metric"]),
            g["count"].to_string(),
            pct(&g["median_abs_error"], false),
            pct(&g["p90_abs_error"], false),
            pct(&g["bias"], true),
            if g["overload_judged"] == 0 {
                "—".into()
            } else {
                format!("{}/{}", g["overload_agree"], g["overload_judged"])
            },
            "—".into(),
        ];
        assert_eq!(cells, want, "{line}");
    }
    // A stage's line has its figures.
    let codegen = runs[0]["metrics"][0].clone();
    let stage_line = table
        .lines()
        .find(|l| l.starts_with("20260217-155451-llama-2-7b-tp1-codegen stage 0 "))
        .unwrap();
    let cell = format!(
        "{:.1} / {:.1} ms ({:+.0}%)",
        num(&codegen["predicted"]) * 1e3,
        num(&codegen["measured"]) * 1e3,
        num(&codegen["error"]) * 100.0
    );
    assert!(stage_line.contains(&cell), "{cell} not in {stage_line}");
    assert!(stage_line.contains("llama-2-7b, h100-sxm, TP 1") && stage_line.contains("medium"));
    let summary_csv = std::fs::read_to_string(d.path().join("summary.csv")).unwrap();
    let mut rdr = csv::Reader::from_reader(summary_csv.as_bytes());
    let header = rdr.headers().unwrap().clone();
    let mut by_key = BTreeMap::new();
    for r in rdr.records() {
        let r = r.unwrap();
        let cells: Vec<String> = r.iter().map(String::from).collect();
        by_key.insert(cells[..5].join("/"), (cells, header.clone()));
    }
    assert_eq!(by_key.len(), summary.len());
    for g in summary {
        let k = [&g["model"], &g["gpu"], &g["tp"], &g["load"], &g["metric"]]
            .map(key)
            .join("/");
        let (cells, header) = &by_key[&k];
        for (i, h) in header.iter().enumerate().skip(5) {
            let v = &g[h];
            if v.is_null() {
                assert_eq!(cells[i], "", "{k} {h}");
            } else {
                assert!(
                    same(csv_num(&cells[i]), num(v)),
                    "{k} {h}: {} {v}",
                    cells[i]
                );
            }
        }
    }
    let svg = std::fs::read_to_string(d.path().join("fidelity.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("y = x") && svg.contains("TTFT mean"));
}

/// No input, an empty folder, a missing or malformed file, a per-request run with no GPU or
/// model to replay on, a table none of whose stages can be replayed: one line naming the file
/// (or what is missing), exit 2, nothing written.
#[test]
fn errors_name_the_file() {
    let d = TempDir::new("validate-serving-errors");
    std::fs::create_dir(d.path().join("empty")).unwrap();
    std::fs::write(d.path().join("empty/notes.txt"), "x").unwrap();
    std::fs::write(d.path().join("bad.csv"), "a,b\n1,2\n").unwrap();
    std::fs::copy(root().join(RUN), d.path().join("run.json")).unwrap();
    std::fs::copy(
        root().join("tests/fixtures/fuzz-requests.csv"),
        d.path().join("requests.csv"),
    )
    .unwrap();
    let table = std::fs::read_to_string(root().join(TABLE)).unwrap();
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    let row = lines.next().unwrap();
    let cols: Vec<&str> = header.split(',').collect();
    let tp = cols.iter().position(|c| *c == "tp").unwrap();
    let mut cells: Vec<&str> = row.split(',').collect();
    // 32 heads do not split over 3 GPUs.
    cells[tp] = "3";
    std::fs::write(
        d.path().join("tp3.csv"),
        format!("{header}\n{}\n", cells.join(",")),
    )
    .unwrap();
    let v = "validate-serving";
    fails_with(&d, &[v], &["FILE_OR_DIR"]);
    fails_with(
        &d,
        &[v, "empty"],
        &["error: empty: no .csv or .json file in the folder"],
    );
    fails_with(&d, &[v, "nope.csv"], &["error: nope.csv: cannot read"]);
    fails_with(&d, &[v, "bad.csv"], &["error: bad.csv: no arrival column"]);
    fails_with(
        &d,
        &[v, "run.json"],
        &["error: run.json: a per-request run names no GPU: give --hardware"],
    );
    fails_with(
        &d,
        &[v, "requests.csv", "--hardware", "h100-sxm"],
        &["error: requests.csv: a per-request run names no model: give --model"],
    );
    fails_with(
        &d,
        &[v, "tp3.csv", "--svg", "f.svg", "--out", "s.csv"],
        &[
            "error: tp3.csv: no stage could be replayed (20260217-155451-llama-2-7b-tp1-codegen stage 0: ",
            "serve.tensor_parallel_size",
        ],
    );
    // The first file at fault is named, before anything is replayed.
    fails_with(
        &d,
        &[v, "run.json", "bad.csv", "--hardware", "h100-sxm"],
        &["error: bad.csv: "],
    );
    assert!(!d.path().join("f.svg").exists() && !d.path().join("s.csv").exists());
}

#[test]
fn help_explains_load_levels_and_the_summary() {
    let d = TempDir::new("validate-serving-help");
    let help = ok(&run_in(d.path(), &["validate-serving", "--help"]));
    for w in [
        "FILE_OR_DIR",
        "--format",
        "--svg",
        "--out",
        "--model",
        "--hardware",
        "light below half",
        "band coverage",
        "measured overloaded",
    ] {
        assert!(help.contains(w), "{w} not in --help");
    }
}

/// `--confidence`: each stage's metrics carry a band holding its value, and the summary's
/// band_coverage is the share of counted measurements inside their bands (recounted here from
/// the runs); without the flag there is none.
#[test]
fn confidence_fills_the_band_coverage() {
    let d = TempDir::new("validate-serving-bands");
    let text = std::fs::read_to_string(root().join(TABLE)).unwrap();
    // The header, two served Llama stages and two served Mixtral ones (not the pooled rows,
    // stage_index -1).
    let served = |l: &&str| l.contains(",ok,") && !l.contains(",-1,");
    let mut keep: Vec<&str> = text.lines().take(1).collect();
    keep.extend(
        text.lines()
            .filter(|l| l.contains("llama-2") && served(l))
            .take(2),
    );
    keep.extend(
        text.lines()
            .filter(|l| l.contains("mixtral") && served(l))
            .take(2),
    );
    std::fs::write(d.path().join("s.csv"), keep.join("\n") + "\n").unwrap();
    let json = |extra: &[&str]| -> serde_json::Value {
        let a = [
            &["validate-serving", "s.csv", "--format", "json"][..],
            extra,
        ]
        .concat();
        serde_json::from_str(&ok(&run_in(d.path(), &a))).unwrap()
    };
    let plain = json(&[]);
    assert!(
        plain["summary"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["band_coverage"].is_null())
    );
    let v = json(&["--confidence", "--band-draws", "2"]);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let (mut inside, mut all) = (0, 0);
    for r in runs {
        for m in r["metrics"].as_array().unwrap() {
            if m["metric"] != "ttft_mean_s" {
                continue;
            }
            let b = &m["band"];
            assert!(num(&b["lo"]) < num(&b["hi"]), "{m}");
            assert_eq!(num(&b["coverage"]), 0.8);
            all += 1;
            inside += usize::from(
                num(&b["lo"]) <= num(&m["measured"]) && num(&m["measured"]) <= num(&b["hi"]),
            );
        }
    }
    let total = v["summary"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["model"].is_null() && g["metric"] == "ttft_mean_s")
        .unwrap();
    assert!(
        same(num(&total["band_coverage"]), inside as f64 / all as f64),
        "{total}"
    );
}
