//! The README never lies: its commands run.

use crate::common::{ok, root, run_in};

/// Commands from the README's code blocks: `kvplan ...` lines and the `cargo run --release -- ...`
/// set-up command (run through the built binary).
fn readme_commands() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let mut cmds = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let line = line.split("   #").next().unwrap().trim();
        let rest = line
            .strip_prefix("cargo run --release -- ")
            .or_else(|| line.strip_prefix("kvplan "));
        // GPU examples cannot run where CI runs (no GPU; tests/cli/measure.rs covers their no-GPU
        // behaviour); CPU-backend examples time real work, so tests/cpu_fidelity.rs runs them in a
        // test binary of their own, away from the other tests' load. A fit to real serving runs
        // replays them a few hundred times (about a minute); calibrate/tests/from_runs.rs runs
        // the same fit on two stages.
        if let Some(rest) = rest.filter(|r| !r.contains("--backend") && !r.contains("--from-runs"))
        {
            cmds.push(rest.split_whitespace().map(String::from).collect());
        }
    }
    cmds
}

#[test]
fn readme_commands_run() {
    let cmds = readme_commands();
    assert!(cmds.len() >= 6, "found {cmds:?}");
    let tmp = crate::common::TempDir::new("readme");
    // Commands run in `repo/`, a copy of what a clone holds that they read.
    let dir = crate::common::TempDir(tmp.path().join("repo"));
    std::fs::create_dir(dir.path()).unwrap();
    // The contract example needs ./config.json and my-profile.toml next to it.
    std::fs::copy(
        root().join("vocab/models/opt-1.3b.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("my-profile.toml"),
        "base = \"a100-40g-pcie4\"\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("scenarios")).unwrap();
    for f in std::fs::read_dir(root().join("scenarios")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(
            &f,
            dir.path().join("scenarios").join(f.file_name().unwrap()),
        )
        .unwrap();
    }
    // The repository's data (traces, measured runs), as a clone has it.
    fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let p = e.unwrap().path();
            let dest = to.join(p.file_name().unwrap());
            if p.is_dir() {
                copy_tree(&p, &dest);
            } else {
                std::fs::copy(&p, &dest).unwrap();
            }
        }
    }
    copy_tree(&root().join("data"), &dir.path().join("data"));
    copy_tree(
        &root().join("calibrate/data"),
        &dir.path().join("calibrate/data"),
    );
    // The regression suite, its goldens with it.
    for sub in ["regress", "regress/golden"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
        for f in std::fs::read_dir(root().join(sub)).unwrap() {
            let f = f.unwrap().path();
            if f.is_file() {
                std::fs::copy(&f, dir.path().join(sub).join(f.file_name().unwrap())).unwrap();
            }
        }
    }
    let mut outputs = std::collections::BTreeMap::new();
    for c in &cmds {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        let out = run_in(dir.path(), &args);
        let text = ok(&out);
        assert!(!text.is_empty(), "{args:?} printed nothing");
        outputs.insert(c.join(" "), text);
    }
    quoted_output_is_what_the_commands_print(&outputs);
}

/// What the README shows of a command's output is what the command prints, so no figure goes
/// stale. Two markers, each naming a command of the README's code blocks:
/// `<!-- output of: CMD -->` before a plain code block: every line of the block but `...` is a
/// line of CMD's output (trailing spaces aside; a line ending in `...` is a prefix of one);
/// `<!-- figures of: CMD | FIG | FIG -->` after a paragraph: each FIG is in that paragraph
/// (whitespace collapsed) and in CMD's output.
fn quoted_output_is_what_the_commands_print(outputs: &std::collections::BTreeMap<String, String>) {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let output_of = |cmd: &str| -> &String {
        outputs
            .get(cmd.trim())
            .unwrap_or_else(|| panic!("README marker names `{cmd}`, not a command the README runs"))
    };
    let mut checked = 0;
    for (i, line) in lines.iter().enumerate() {
        if let Some(cmd) = line
            .strip_prefix("<!-- output of: ")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            let printed: Vec<&str> = output_of(cmd).lines().map(str::trim_end).collect();
            assert_eq!(
                lines[i + 1],
                "```",
                "the marker of `{cmd}` must precede a code block"
            );
            for want in lines[i + 2..].iter().take_while(|l| **l != "```") {
                let want = want.trim_end();
                if want == "..." {
                    continue;
                }
                let found = match want.strip_suffix("...") {
                    Some(prefix) => printed.iter().any(|l| l.starts_with(prefix.trim_end())),
                    None => printed.contains(&want),
                };
                assert!(
                    found,
                    "README shows `{want}` for `{cmd}`, which prints:\n{}",
                    printed.join("\n")
                );
                checked += 1;
            }
        }
        if let Some(rest) = line
            .strip_prefix("<!-- figures of: ")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            let mut parts = rest.split(" | ");
            let cmd = parts.next().unwrap();
            let printed = output_of(cmd);
            let para_start = lines[..i]
                .iter()
                .rposition(|l| l.trim().is_empty())
                .map_or(0, |p| p + 1);
            let para = lines[para_start..i].join(" ");
            let para = para.split_whitespace().collect::<Vec<_>>().join(" ");
            for fig in parts {
                assert!(
                    para.contains(fig),
                    "`{fig}` is not in the paragraph above its marker"
                );
                assert!(
                    printed.contains(fig),
                    "README quotes `{fig}`; `{cmd}` prints:\n{printed}"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} quoted lines and figures checked"
    );
}

#[test]
fn readme_starts_with_the_two_commands_and_ci_runs_the_second() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks: Vec<&str> = text
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().trim())
        .collect();
    assert!(
        blocks[0].starts_with("cargo run --release -- simulate"),
        "{}",
        blocks[0]
    );
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == blocks[1]),
        "CI does not run `{}`",
        blocks[1]
    );
}

/// The README lists the columns a stage table must have: exactly the reader's.
#[test]
fn readme_lists_the_stage_table_columns() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = text
        .find("recognised by its header (these columns")
        .expect("the stage table's header paragraph");
    let end = start + text[start..].find("each stage replayed").unwrap();
    let listed: Vec<&str> = text[start..end].split('`').skip(1).step_by(2).collect();
    assert_eq!(listed, kvplan_serve::runs::STAGE_COLUMNS.to_vec());
}
