//! Which sweep wrote a file of rows: a hash of the sweep as resolved (its kind, its base with
//! a `base_file` read in, its axes and points; not its comments or layout) and kvplan's
//! version, kept in a sidecar beside the rows (`ROWS.fingerprint`). `kvplan sweep` (resuming a
//! file) and `kvplan merge` refuse rows whose sidecar names another sweep or another kvplan version.
//! The rows themselves stay as they are (no comment line), so merged shards are still the
//! unsharded file byte for byte.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::file::Sweep;

/// A sweep's fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// The resolved sweep's hash (16 hex digits, FNV-1a 64).
    pub sweep: String,
    /// The kvplan version that ran it.
    pub kvplan: String,
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sweep {}, kvplan {}", self.sweep, self.kvplan)
    }
}

impl Fingerprint {
    /// The fingerprint of a sweep whose resolved text hashes to `sweep`, run by this kvplan.
    pub(crate) fn new(sweep: String) -> Self {
        Fingerprint {
            sweep,
            kvplan: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// The sidecar of the rows file `rows`: `ROWS.fingerprint`.
    pub fn path(rows: &Path) -> PathBuf {
        let mut name = rows.as_os_str().to_owned();
        name.push(".fingerprint");
        PathBuf::from(name)
    }

    /// The sidecar's text; its comment names `resume`, the option of `kvplan sweep` that
    /// continues a file, as the command line spells it.
    pub fn to_text(&self, resume: &str) -> String {
        format!(
            "# kvplan sweep fingerprint: `kvplan sweep {resume}` and `kvplan merge` check that rows added to\n# the file beside it come from the same sweep, run by the same kvplan version\nsweep = \"{}\"\nkvplan = \"{}\"\n",
            self.sweep, self.kvplan
        )
    }

    /// The fingerprint beside the rows file `rows`, if it has one. A sidecar that cannot be read
    /// or parsed is an error naming it.
    pub fn read(rows: &Path) -> Result<Option<Fingerprint>, String> {
        let p = Fingerprint::path(rows);
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: cannot read: {e}", p.display())),
        };
        #[derive(serde::Deserialize)]
        struct Raw {
            sweep: String,
            kvplan: String,
        }
        let raw: Raw = toml::from_str(&text).map_err(|e| {
            format!(
                "{}: not a sweep fingerprint ({}); delete it",
                p.display(),
                e.message().trim()
            )
        })?;
        Ok(Some(Fingerprint {
            sweep: raw.sweep,
            kvplan: raw.kvplan,
        }))
    }
}

impl Sweep {
    /// This sweep's fingerprint, run by this kvplan.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::new(self.hash.clone())
    }

    /// Checks that the rows file `rows` (which holds rows) was written by this sweep: refused,
    /// with both fingerprints, when its sidecar names another one. A file without a sidecar
    /// (written by hand, or by an older kvplan) is left to the header check.
    pub fn check_fingerprint(&self, rows: &Path) -> Result<(), String> {
        let ours = self.fingerprint();
        match Fingerprint::read(rows)? {
            Some(theirs) if theirs != ours => Err(format!(
                "{}: rows of another sweep or kvplan version ({theirs}, in {}), not of this one ({ours}); delete it to start over, or write elsewhere",
                rows.display(),
                Fingerprint::path(rows).display()
            )),
            _ => Ok(()),
        }
    }
}

/// The fingerprint the shard outputs `inputs` share, checked against `sweep`'s when given:
/// refused, naming the file and both fingerprints, when one differs from the sweep's (or,
/// without a sweep, from the first input's). Inputs without a sidecar are not checked.
pub fn check_shards(
    inputs: &[PathBuf],
    sweep: Option<(&Path, &Sweep)>,
) -> Result<Option<Fingerprint>, String> {
    let mut want: Option<(String, Fingerprint)> =
        sweep.map(|(p, s)| (format!("the sweep file {}", p.display()), s.fingerprint()));
    for input in inputs {
        let Some(fp) = Fingerprint::read(input)? else {
            continue;
        };
        match &want {
            Some((what, w)) if *w != fp => {
                return Err(format!(
                    "{} holds rows of another sweep or kvplan version ({fp}) than {what} ({w}); merge outputs of one sweep",
                    input.display()
                ));
            }
            Some(_) => {}
            None => want = Some((input.display().to_string(), fp)),
        }
    }
    Ok(want.map(|(_, f)| f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::fnv1a;

    #[test]
    fn the_hash_is_stable() {
        // FNV-1a's published test vectors.
        assert_eq!(fnv1a(""), "cbf29ce484222325");
        assert_eq!(fnv1a("a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn the_fingerprint_follows_the_sweep_not_its_layout() {
        let a = "kind = \"simulate\"\n[base]\nmodel = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\nworkload = { prompt = 128 }\n[axes]\n\"workload.batch\" = [1, 2]\n";
        let b = format!("# a comment\n{a}");
        let c = a.replace("128", "1024");
        let fp = |t: &str| Sweep::parse(t, Path::new("s.toml")).unwrap().fingerprint();
        assert_eq!(fp(a), fp(&b));
        assert_ne!(fp(a), fp(&c));
        // Where the file is does not matter.
        let elsewhere = Sweep::parse(a, Path::new("x/y/s.toml"))
            .unwrap()
            .fingerprint();
        assert_eq!(fp(a), elsewhere);
    }
}
