//! `kvplan plot` and `kvplan serve --plot / --plot-cdf`: SVG files with labelled axes, a legend
//! and a line per series; byte-identical reruns; bad input exits 2 with one line and no file.

use crate::common::{TempDir, ok, run_in};

const TABLE: &str = "strategy,batch,decode_throughput_tok_s,decode_latency_s
kvpr,8,100.5,0.4
kvpr,16,180.25,0.5
kvpr,32,300,0.7
full-transfer,8,60,0.6
full-transfer,16,90,0.9
full-transfer,32,error: does not fit,
gpu-only,8,400,0.1
";

fn dir_with_table(name: &str) -> TempDir {
    let d = TempDir::new(name);
    std::fs::write(d.path().join("sweep.csv"), TABLE).unwrap();
    d
}

/// Loose XML check: one root <svg> element, balanced tags.
fn assert_svg(svg: &str) {
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    let opened = svg.matches("<text").count();
    assert_eq!(opened, svg.matches("</text>").count());
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
}

#[test]
fn plot_a_sweep_table_one_line_per_series() {
    let d = dir_with_table("plot-sweep");
    let args = [
        "plot",
        "sweep.csv",
        "--x",
        "batch",
        "--y",
        "decode_throughput_tok_s",
        "--series",
        "strategy",
        "--out",
        "a.svg",
    ];
    let out = run_in(d.path(), &args);
    let stdout = ok(&out);
    assert!(stdout.contains("written to a.svg"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim(),
        "note: 1 of 7 rows skipped: batch or decode_throughput_tok_s is not a number"
    );
    let svg = std::fs::read_to_string(d.path().join("a.svg")).unwrap();
    assert_svg(&svg);
    for want in [
        "batch",
        "decode_throughput_tok_s (tokens/s)",
        "strategy=kvpr",
        "strategy=full-transfer",
        "strategy=gpu-only",
    ] {
        assert!(svg.contains(want), "missing {want:?}");
    }
    // A 2-pixel polyline per series and per legend entry; axes and grid are 1-pixel.
    assert_eq!(svg.matches("stroke-width=\"2\"").count(), 6);
    // Byte-identical on a rerun, and the same SVG on stdout without --out.
    ok(&run_in(
        d.path(),
        &args[..args.len() - 2]
            .iter()
            .chain(&["--out", "b.svg"])
            .copied()
            .collect::<Vec<_>>(),
    ));
    assert_eq!(
        svg,
        std::fs::read_to_string(d.path().join("b.svg")).unwrap()
    );
    let stdout = ok(&run_in(d.path(), &args[..args.len() - 2]));
    assert_eq!(svg, stdout);
}

#[test]
fn plot_bad_input_exits_2_with_one_line_and_no_file() {
    let d = dir_with_table("plot-bad");
    std::fs::write(d.path().join("empty.csv"), "a,b\n").unwrap();
    for (args, want) in [
        (
            vec!["sweep.csv", "--x", "nope", "--y", "decode_latency_s"],
            "no column 'nope' (columns: strategy,batch,decode_throughput_tok_s,decode_latency_s)",
        ),
        (
            vec![
                "sweep.csv",
                "--x",
                "batch",
                "--y",
                "decode_latency_s",
                "--series",
                "x",
            ],
            "no column 'x'",
        ),
        (
            vec!["empty.csv", "--x", "a", "--y", "b"],
            "the table has no rows",
        ),
        (
            vec!["sweep.csv", "--x", "strategy", "--y", "decode_latency_s"],
            "column 'strategy' has no numeric value",
        ),
        (vec!["missing.csv", "--x", "a", "--y", "b"], "missing.csv"),
    ] {
        let mut full = vec!["plot"];
        full.extend(&args);
        full.extend(["--out", "out.svg"]);
        let out = run_in(d.path(), &full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!d.path().join("out.svg").exists(), "{args:?}");
    }
}

const SERVE: [&str; 15] = [
    "serve",
    "--model",
    "llama-2-7b",
    "--hardware",
    "a100-80g-sxm",
    "--arrivals",
    "poisson",
    "--qps",
    "4",
    "--lengths",
    "512",
    "--output-lengths",
    "64",
    "--requests",
    "100",
];

#[test]
fn serve_writes_the_time_series_and_cdf_plots() {
    let d = TempDir::new("plot-serve");
    let mut args = SERVE.to_vec();
    args.extend(["--plot", "serve.svg", "--plot-cdf", "cdf.svg"]);
    let table = ok(&run_in(d.path(), &args));
    assert!(table.contains("--plot: written to serve.svg"), "{table}");
    assert!(table.contains("--plot-cdf: written to cdf.svg"), "{table}");
    let series = std::fs::read_to_string(d.path().join("serve.svg")).unwrap();
    assert_svg(&series);
    for want in [
        "time (s)",
        "KV blocks used (blocks)",
        "sequences (count)",
        "GPU",
        "host",
        "running",
        "waiting",
        "swapped",
    ] {
        assert!(series.contains(want), "missing {want:?} in serve.svg");
    }
    let cdf = std::fs::read_to_string(d.path().join("cdf.svg")).unwrap();
    assert_svg(&cdf);
    for want in ["latency (s", "fraction of requests", "TTFT", "TPOT", "E2E"] {
        assert!(cdf.contains(want), "missing {want:?} in cdf.svg");
    }
    assert_eq!(cdf.matches("stroke-width=\"2\"").count(), 6);
    // Byte-identical on a rerun.
    ok(&run_in(d.path(), &args));
    assert_eq!(
        series,
        std::fs::read_to_string(d.path().join("serve.svg")).unwrap()
    );
    assert_eq!(
        cdf,
        std::fs::read_to_string(d.path().join("cdf.svg")).unwrap()
    );
}

#[test]
fn serve_plot_into_a_missing_directory_exits_2() {
    let d = TempDir::new("plot-serve-bad");
    let mut args = SERVE.to_vec();
    args.extend(["--plot-cdf", "no/such/cdf.svg"]);
    let out = run_in(d.path(), &args);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--plot-cdf"), "{stderr}");
    // No request finishes (every prompt exceeds the context): nothing to plot, no file at all.
    let mut args = SERVE.to_vec();
    args[10] = "100000";
    args.extend(["--plot-cdf", "cdf.svg", "--summary-json", "s.json"]);
    let out = run_in(d.path(), &args);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim(), "error: --plot-cdf: no request finished");
    assert!(d.files().is_empty(), "{:?}", d.files());
}
