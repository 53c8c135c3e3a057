//! The planner's typed errors. Only the binary turns them into messages and exit codes.

use std::path::PathBuf;

/// Everything that can go wrong while loading inputs or planning.
///
/// Each variant names the field or file at fault and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A model name that is neither a preset nor a readable file.
    #[error("unknown model '{name}'{}; known models: {}; or pass the path of a Hugging Face config.json or model directory", did_you_mean(close), known.join(", "))]
    UnknownModel {
        /// What the user asked for.
        name: String,
        /// The presets closest to `name` ([`close_matches`]), closest first; may be empty.
        close: Vec<String>,
        /// The preset names.
        known: Vec<String>,
    },
    /// A hardware name that is neither a preset nor a readable file.
    #[error("unknown hardware '{name}'{}; known profiles: {}; or pass the path of a profile TOML file", did_you_mean(close), known.join(", "))]
    UnknownHardware {
        /// What the user asked for.
        name: String,
        /// The presets closest to `name` ([`close_matches`]), closest first; may be empty.
        close: Vec<String>,
        /// The preset names.
        known: Vec<String>,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid JSON / TOML, or has a field of the wrong type.
    #[error("{origin}: {message}")]
    Parse {
        /// The file (or preset) being parsed.
        origin: String,
        /// What the parser said, on one line.
        message: String,
    },
    /// A required field is absent.
    #[error("{origin}: missing field `{field}`{}", hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    MissingField {
        /// The file (or preset) being read.
        origin: String,
        /// The missing field.
        field: String,
        /// What it should hold.
        hint: Option<String>,
    },
    /// A Hugging Face config of an architecture kvplan does not model.
    #[error("{origin}: unsupported model_type '{model_type}'; supported: {}", supported.join(", "))]
    UnsupportedArchitecture {
        /// The config file.
        origin: String,
        /// Its `model_type`.
        model_type: String,
        /// The model types kvplan reads.
        supported: Vec<String>,
    },
    /// A value out of its accepted range.
    #[error("{field}: {message} (got {value})")]
    InvalidValue {
        /// The field, as the user wrote it (a command-line option, `workload.batch`, `link.h2d_pinned_gbps`).
        field: String,
        /// The value given.
        value: String,
        /// What is accepted.
        message: String,
    },
    /// A plan needs more memory than the device or host has.
    #[error(
        "{what} does not fit: needs {need_gib:.2} GiB ({breakdown}) but {resource} offers {have_gib:.2} GiB, short by {short_gib:.2} GiB; {advice}"
    )]
    DoesNotFit {
        /// The strategy or plan that does not fit.
        what: String,
        /// `GPU memory of a100-40g-pcie4`, `host RAM of ...`.
        resource: String,
        /// Bytes needed, in GiB.
        need_gib: f64,
        /// Bytes available, in GiB.
        have_gib: f64,
        /// `need - have`, in GiB.
        short_gib: f64,
        /// The largest items, e.g. `weights 12.4 GiB, KV 30.0 GiB`.
        breakdown: String,
        /// What to change.
        advice: String,
    },
    /// The LP solver failed (should not happen for a well-formed split problem).
    #[error("linear program for {what} failed: {message}")]
    Solver {
        /// Which decision.
        what: String,
        /// The solver's message.
        message: String,
    },
    /// A schedule that breaks an IR rule (a dependency on a later op, an unknown stream).
    #[error("invalid schedule: {0}")]
    InvalidSchedule(String),
}

impl Error {
    /// Shorthand for [`Error::InvalidValue`].
    pub fn invalid(
        field: impl Into<String>,
        value: impl ToString,
        message: impl Into<String>,
    ) -> Self {
        Error::InvalidValue {
            field: field.into(),
            value: value.to_string(),
            message: message.into(),
        }
    }

    /// True for errors caused by the user's input (the CLI maps them to exit code 2).
    pub fn is_input_error(&self) -> bool {
        !matches!(self, Error::Solver { .. } | Error::InvalidSchedule(_))
    }
}

/// The planner's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// ` (did you mean a, b or c?)`, or nothing when there is no close match.
fn did_you_mean(close: &[String]) -> String {
    match close {
        [] => String::new(),
        [one] => format!(" (did you mean {one}?)"),
        [init @ .., last] => format!(" (did you mean {} or {last}?)", init.join(", ")),
    }
}

/// Edit distance (insertions, deletions, substitutions) between two strings, by character.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The entries of `known` close to `name`, closest first, at most four: those within a small
/// edit distance (2, or a quarter of the longer name), case-insensitive, and those that start
/// with `name` or contain it (`h100` → `h100-sxm`, `h100-pcie`). A Hugging Face id is also
/// compared by its last part (`org/Qwen3-7B` → `qwen3-8b`).
pub fn close_matches(name: &str, known: &[String]) -> Vec<String> {
    let name = name.trim().to_ascii_lowercase();
    let short = name.rsplit('/').next().unwrap_or(&name).to_string();
    if short.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(usize, &String)> = known
        .iter()
        .filter_map(|k| {
            let kl = k.to_ascii_lowercase();
            let d = edit_distance(&name, &kl).min(edit_distance(&short, &kl));
            let limit = 2.max(kl.chars().count().max(short.chars().count()) / 4);
            let contains = short.chars().count() >= 2 && kl.contains(&short);
            (d <= limit || contains).then_some((if contains { d.min(limit) } else { d }, k))
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().take(4).map(|(_, k)| k.clone()).collect()
}

/// The 1-based line of `text` where a TOML parse error points, where the parser knows it: the
/// one rule every reader of a TOML file (profiles, scenarios, sweeps) uses to name the line.
pub fn toml_line(text: &str, e: &toml::de::Error) -> Option<usize> {
    e.span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
}

/// The dotted path of the key whose value a TOML error points at (`serve.max_num_seqs`,
/// `cluster.replica[1].count`), where the error has a place in `text` and a key's value (or
/// the key itself) holds it: a type or range error from a typed parse names no field of its
/// own ("invalid value: integer `-1`, expected u32").
pub fn toml_key(text: &str, e: &toml::de::Error) -> Option<String> {
    use toml::de::{DeTable, DeValue};
    fn search(v: &DeValue<'_>, at: usize, path: &mut String) -> bool {
        match v {
            DeValue::Table(t) => t.iter().any(|(k, v)| {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k.get_ref());
                let span = v.span();
                let hit = search(v.get_ref(), at, path)
                    || (!matches!(v.get_ref(), DeValue::Table(_) | DeValue::Array(_))
                        && span.contains(&at))
                    || k.span().contains(&at);
                if !hit {
                    path.truncate(len);
                }
                hit
            }),
            DeValue::Array(a) => a.iter().enumerate().any(|(i, v)| {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let hit = search(v.get_ref(), at, path)
                    || (!matches!(v.get_ref(), DeValue::Table(_) | DeValue::Array(_))
                        && v.span().contains(&at));
                if !hit {
                    path.truncate(len);
                }
                hit
            }),
            _ => false,
        }
    }
    let at = e.span()?.start;
    let doc = DeTable::parse(text).ok()?;
    let mut path = String::new();
    search(&DeValue::Table(doc.into_inner()), at, &mut path).then_some(path)
}

/// The dotted key at which a typed parse of `table` (already parsed, so without places) into
/// `T` fails: the table written out as TOML and parsed again, the error's place then naming
/// the key ([`toml_key`]). `None` when it parses.
pub fn toml_table_key<T: serde::de::DeserializeOwned>(table: &toml::Table) -> Option<String> {
    let text = toml::to_string(table).ok()?;
    let e = toml::from_str::<T>(&text).err()?;
    toml_key(&text, &e)
}

/// The 1-based line of `text` where the value at the dotted `key` (as [`toml_key`] writes it)
/// is written, where `text` writes it.
pub fn toml_line_of(text: &str, key: &str) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(text).ok()?;
    let mut table: &DeTable<'_> = doc.get_ref();
    let parts: Vec<&str> = key.split('.').collect();
    let mut at = None;
    for (n, part) in parts.iter().enumerate() {
        let (name, indices) = part.split_at(part.find('[').unwrap_or(part.len()));
        let mut v = table.iter().find(|(k, _)| k.get_ref() == name)?.1;
        for index in indices.split(['[', ']']).filter(|s| !s.is_empty()) {
            let DeValue::Array(a) = v.get_ref() else {
                return None;
            };
            v = a.get(index.parse::<usize>().ok()?)?;
        }
        if n + 1 == parts.len() {
            at = Some(v.span().start);
        } else {
            let DeValue::Table(t) = v.get_ref() else {
                return None;
            };
            table = t;
        }
    }
    let at = at?.min(text.len());
    Some(text[..at].matches('\n').count() + 1)
}

/// A typed TOML parser's message in words: `expected u32` is a whole number from 0 to
/// 4294967295, `expected f64` a number, ... (the Rust type means nothing to a file's author).
pub fn toml_message(message: &str) -> String {
    const WORDS: [(&str, &str); 9] = [
        ("u8", "a whole number from 0 to 255"),
        ("u16", "a whole number from 0 to 65535"),
        ("u32", "a whole number from 0 to 4294967295"),
        ("u64", "a whole number from 0 to 18446744073709551615"),
        ("usize", "a whole number, 0 or more"),
        ("i32", "a whole number"),
        ("i64", "a whole number"),
        ("f32", "a number"),
        ("f64", "a number"),
    ];
    let text = one_line(message);
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(i) = rest.find("expected ") {
        let after = &rest[i + "expected ".len()..];
        let word_end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        out.push_str(&rest[..i + "expected ".len()]);
        match WORDS.iter().find(|(ty, _)| *ty == &after[..word_end]) {
            Some((_, words)) => out.push_str(words),
            None => out.push_str(&after[..word_end]),
        }
        rest = &after[word_end..];
    }
    out.push_str(rest);
    out
}

/// Collapses a multi-line parser message into one line.
pub(crate) fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '|' || c == '^' || c == ' '))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why `path`, which exists, cannot be read as the `field` (`model`, `hardware`) it was given
/// for: a directory, or something that is not a regular file (`/dev/null`, a FIFO, a socket);
/// `what` says what is expected. `None` when it does not exist or is a file.
pub(crate) fn not_a_file(path: &std::path::Path, field: &str, what: &str) -> Option<Error> {
    let meta = std::fs::metadata(path).ok()?;
    let kind = if meta.is_dir() {
        "a directory"
    } else if meta.is_file() {
        return None;
    } else {
        "not a regular file"
    };
    Some(Error::invalid(
        field,
        path.display(),
        format!("{kind}; expected {what}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn toml_errors_name_their_key_in_words() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Serve {
            max_num_seqs: Option<u32>,
            qps: Option<f64>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct File {
            serve: Option<Serve>,
            replica: Option<Vec<Serve>>,
        }
        for (text, key, words) in [
            (
                "[serve]\nqps = 1.0\nmax_num_seqs = -1\n",
                "serve.max_num_seqs",
                "invalid value: integer `-1`, expected a whole number from 0 to 4294967295",
            ),
            (
                "serve = { qps = \"x\" }\n",
                "serve.qps",
                "invalid type: string \"x\", expected a number",
            ),
            (
                "[[replica]]\nqps = 1\n[[replica]]\nmax_num_seqs = 1.5\n",
                "replica[1].max_num_seqs",
                "invalid type: floating point `1.5`, expected a whole number from 0 to 4294967295",
            ),
        ] {
            let e = toml::from_str::<File>(text).unwrap_err();
            assert_eq!(toml_key(text, &e).as_deref(), Some(key), "{text}");
            assert_eq!(toml_message(e.message()), words, "{text}");
        }
        // A table already parsed (merged, or a sweep point) has no places: written out again.
        let table: toml::Table =
            toml::from_str("[[replica]]\nqps = 1.0\n[[replica]]\nqps = 2.0\nmax_num_seqs = -4\n")
                .unwrap();
        let key = toml_table_key::<File>(&table);
        assert_eq!(key.as_deref(), Some("replica[1].max_num_seqs"));
        let text = "# comment\n[serve]\nqps = 1.0\n\n[[replica]]\nqps = 3.0\n";
        assert_eq!(toml_line_of(text, "serve.qps"), Some(3));
        assert_eq!(toml_line_of(text, "replica[0].qps"), Some(6));
        assert_eq!(toml_line_of(text, "replica[1].qps"), None);
        assert_eq!(toml_message("expected u32s or u8"), "expected u32s or u8");
        assert_eq!(
            toml_message("expected u8"),
            "expected a whole number from 0 to 255"
        );
    }

    #[test]
    fn close_matches_rank_by_edit_distance_and_prefix() {
        let known = names(&[
            "opt-6.7b",
            "opt-13b",
            "llama-3-8b",
            "llama-3.1-8b",
            "h100-sxm",
            "h100-pcie",
            "h200",
        ]);
        assert_eq!(close_matches("lama-3-8b", &known)[0], "llama-3-8b");
        assert_eq!(
            close_matches("opt-7b", &known),
            names(&["opt-13b", "opt-6.7b"])
        );
        assert_eq!(
            close_matches("h100", &known),
            names(&["h200", "h100-pcie", "h100-sxm"])
        );
        assert!(close_matches("zzzzzz", &known).is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(
            did_you_mean(&names(&["a", "b", "c"])),
            " (did you mean a, b or c?)"
        );
        assert_eq!(did_you_mean(&[]), "");
    }
}
