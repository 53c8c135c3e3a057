//! A run's output files, checked and claimed before the run starts ([`claim`]), and the files
//! removed if the process is interrupted ([`register_cleanup`](crate::cleanup::register_cleanup)).
//!
//! Before anything runs, every output is checked: not a directory, its directory exists and can
//! be written, not one of the run's inputs (the same file however it is named: `./x` and `x`,
//! a symlink, a hard link), and not named twice. Each regular output is then locked for the
//! length of the run: an advisory lock (`flock`) on a lock file beside it, `.NAME.lock`, which
//! holds the locking process's id. A second kvplan writing the same file is refused, naming
//! that process. The lock files are removed when the run ends, including on SIGINT, SIGTERM or
//! SIGHUP; a run killed outright (SIGKILL) leaves its lock file, which the next run takes over
//! (the kernel releases the lock of a dead process), saying so ([`Claim::notes`]). Holding the
//! lock, a run also removes the temporary files that such a killed run left beside the output
//! ([`remove_orphaned_temps`]): no live kvplan can be writing them.
//!
//! Labels (`what`) are the caller's: the command line passes its flags.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::cleanup::{register_cleanup, settle};
use crate::error::Error;
use crate::files::{Target, remove_orphaned_temps, resolve};

/// The outputs of a run, locked until this is dropped.
#[derive(Debug, Default)]
pub struct Claim {
    locks: Vec<(PathBuf, File)>,
    notes: Vec<String>,
}

impl Claim {
    /// What claiming cleaned up after runs that were killed outright, one line each (for
    /// stderr, after `note: `): a stale lock file taken over, a temporary file removed.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        for (path, file) in self.locks.drain(..) {
            // Removed while still locked, so that no other process finds it unlocked and
            // then sees it vanish; closing the file releases the lock.
            settle(&path, || fs::remove_file(&path).ok());
            drop(file);
        }
    }
}

/// An output as checked: where it leads and what it is.
struct Checked<'a> {
    what: &'a str,
    path: &'a Path,
    /// The final file (symlinks followed, its directory canonical), for regular files and paths
    /// that do not exist yet; `None` for FIFOs and devices, which are written in place and not
    /// locked.
    target: Option<PathBuf>,
}

fn shown(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// The directory and file name of a path to be written (`.` for a bare name).
fn split(p: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    let name = p.file_name()?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some((dir, name))
}

/// Whether two paths lead to the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (fs::metadata(a), fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        matches!((fs::canonicalize(a), fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
    }
}

/// Checks the `outputs` of a run (each `(what, path)`, `what` its label in messages) against
/// each other and against its `inputs` (the files it reads, labelled the same way; inputs
/// that do not exist are skipped), then locks every regular output until the returned
/// [`Claim`] is dropped. Call it before the run starts: an error means nothing was written.
///
/// Every problem is an input error (exit code 2) naming the option: an output that is a
/// directory, whose directory does not exist or cannot be written, that is one of the inputs,
/// that another output names too, or that another process is writing.
pub fn claim(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<Claim, Error> {
    let checked = outputs
        .iter()
        .map(|&(what, path)| check_output(what, path))
        .collect::<Result<Vec<_>, _>>()?;
    check_distinct(&checked, inputs)?;
    let mut claim = Claim::default();
    for out in &checked {
        if let Some(target) = &out.target {
            let (lp, file, stale) = lock(out.what, out.path, target)?;
            claim.locks.push((lp.clone(), file));
            if let Some(pid) = stale {
                claim.notes.push(format!(
                    "{}: took over the stale lock file {} of process {pid}, which is no longer running (killed before it could remove it)",
                    out.what,
                    lp.display()
                ));
            }
            for tmp in remove_orphaned_temps(target) {
                claim.notes.push(format!(
                    "{}: removed {}, left by a run that was killed while writing {}",
                    out.what,
                    tmp.display(),
                    shown(out.path)
                ));
            }
        }
    }
    Ok(claim)
}

/// The output `path` (the option `what`) as it will be written: refused where it is a
/// directory, not a file path, or in a directory that does not exist.
fn check_output<'a>(what: &'a str, path: &'a Path) -> Result<Checked<'a>, Error> {
    let target = resolve(path)
        .map_err(|e| Error::Input(format!("{what}: cannot use {}: {e}", shown(path))))?;
    let target = match target {
        Target::Directory(p) => {
            return Err(Error::Input(format!(
                "{what}: {} is a directory; give a file path",
                shown(&p)
            )));
        }
        Target::Special(_) => None,
        Target::Replace(p, _) => {
            let (dir, name) = split(&p).ok_or_else(|| {
                Error::Input(format!("{what}: {} is not a file path", shown(path)))
            })?;
            if !dir.is_dir() {
                return Err(Error::Input(format!(
                    "{what}: cannot write {}: directory '{}' does not exist",
                    shown(path),
                    dir.display()
                )));
            }
            let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            Some(dir.join(name))
        }
    };
    Ok(Checked { what, path, target })
}

/// Refuses an output that is one of the `inputs`, or that another output names too.
fn check_distinct(checked: &[Checked], inputs: &[(&str, &Path)]) -> Result<(), Error> {
    for (i, out) in checked.iter().enumerate() {
        for &(input, ipath) in inputs {
            let same = same_file(out.path, ipath)
                || out.target.as_ref().is_some_and(|t| {
                    fs::canonicalize(ipath).is_ok_and(|c| c == *t) || same_file(t, ipath)
                });
            if same {
                return Err(Error::Input(format!(
                    "{} {} is also the input {input} ({}); writing it would destroy the input: write the output elsewhere",
                    out.what,
                    shown(out.path),
                    shown(ipath)
                )));
            }
        }
        for other in &checked[..i] {
            let same = match (&out.target, &other.target) {
                (Some(a), Some(b)) => a == b,
                _ => false,
            } || same_file(out.path, other.path);
            if same {
                return Err(Error::Input(format!(
                    "{} and {} both name {}; give each output its own file",
                    other.what,
                    out.what,
                    shown(out.path)
                )));
            }
        }
    }
    Ok(())
}

/// The lock file of the output `target`: `.NAME.lock` beside it.
fn lock_path(target: &Path) -> PathBuf {
    let (dir, name) = split(target).unwrap_or((Path::new("."), target.as_os_str()));
    dir.join(format!(".{}.lock", name.to_string_lossy()))
}

/// Locks the output `target` (named `path` by the option `what`): its lock file created or
/// taken over, locked, and holding this process's id. Also returns the id of the process whose
/// lock file was taken over, if it names one: a lock file that is there, unlocked, was left by
/// a process killed before it could remove it (the kernel releases a dead process's lock).
fn lock(what: &str, path: &Path, target: &Path) -> Result<(PathBuf, File, Option<u32>), Error> {
    let lp = lock_path(target);
    let cannot = |e: io::Error| {
        let dir = lp.parent().unwrap_or(Path::new("."));
        Error::Input(format!(
            "{what}: cannot write in directory '{}': {e}",
            dir.display()
        ))
    };
    // A lock file removed by its holder between our open and our lock is retried: the lock
    // must be on the file the path names.
    for _ in 0..100 {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lp)
            .map_err(cannot)?;
        match fs4::FileExt::try_lock(&f) {
            Ok(()) => {}
            Err(fs4::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = f.read_to_string(&mut holder);
                let holder = match holder.trim().parse::<u32>() {
                    Ok(pid) => format!("another kvplan (process {pid})"),
                    Err(_) => "another kvplan".to_string(),
                };
                return Err(Error::Input(format!(
                    "{what}: {} is being written by {holder}; wait for it to finish or write elsewhere (lock file {})",
                    shown(path),
                    lp.display()
                )));
            }
            Err(fs4::TryLockError::Error(e)) => return Err(cannot(e)),
        }
        if !same_open_file(&f, &lp) {
            continue;
        }
        register_cleanup(&lp);
        let mut before = String::new();
        let _ = f.read_to_string(&mut before);
        let stale = before
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&pid| pid != std::process::id());
        let written = f
            .set_len(0)
            .and_then(|()| f.rewind())
            .and_then(|()| writeln!(f, "{}", std::process::id()))
            .and_then(|()| f.flush());
        if let Err(e) = written {
            settle(&lp, || fs::remove_file(&lp).ok());
            return Err(cannot(e));
        }
        return Ok((lp, f, stale));
    }
    Err(Error::Failure(format!(
        "{what}: cannot lock {}: its lock file {} keeps changing",
        shown(path),
        lp.display()
    )))
}

/// Whether the open file `f` is the file `path` names now.
fn same_open_file(f: &File, path: &Path) -> bool {
    let (Ok(a), Ok(b)) = (f.metadata(), fs::metadata(path)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory for one test (`crate::test_dir`).
    fn dir(name: &str) -> crate::test_dir::Dir {
        crate::test_dir::Dir::new("kvplan-claim", name)
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_however_it_is_named() {
        let d = dir("input");
        let input = d.0.join("my.toml");
        fs::write(&input, "model = 1\n").unwrap();
        let dotted = d.0.join(".").join("my.toml");
        let e = claim(&[("SCENARIO", &input)], &[("--trace", &dotted)]).unwrap_err();
        assert!(e.is_input());
        let m = e.message();
        assert!(m.contains("--trace") && m.contains("SCENARIO"), "{m}");
        #[cfg(unix)]
        {
            let link = d.0.join("link.toml");
            std::os::unix::fs::symlink("my.toml", &link).unwrap();
            assert!(claim(&[("SCENARIO", &input)], &[("--trace", &link)]).is_err());
            let hard = d.0.join("hard.toml");
            fs::hard_link(&input, &hard).unwrap();
            assert!(claim(&[("SCENARIO", &hard)], &[("--trace", &input)]).is_err());
        }
        assert_eq!(fs::read_to_string(&input).unwrap(), "model = 1\n");
        // Another file is fine, and its lock file goes when the claim does.
        let out = d.0.join("t.json");
        let c = claim(&[("SCENARIO", &input)], &[("--trace", &out)]).unwrap();
        assert!(d.names().contains(&".t.json.lock".to_string()));
        drop(c);
        assert!(
            !d.names().iter().any(|n| n.ends_with(".lock")),
            "{:?}",
            d.names()
        );
    }

    #[test]
    fn a_second_claim_names_the_holder() {
        let d = dir("lock");
        let out = d.0.join("rows.csv");
        let first = claim(&[], &[("--out", &out)]).unwrap();
        let e = claim(&[], &[("--out", &out)]).unwrap_err();
        assert!(e.is_input());
        let pid = std::process::id().to_string();
        assert!(e.message().contains(&pid), "{e}");
        assert!(e.message().starts_with("--out: "), "{e}");
        drop(first);
        claim(&[], &[("--out", &out)]).unwrap();
    }

    #[test]
    fn a_stale_lock_is_taken_over_and_a_killed_runs_temporary_files_removed() {
        let d = dir("stale");
        let out = d.0.join("rows.csv");
        // A run killed outright left its lock file (unlocked: the kernel released it) and a
        // temporary file; process 0 is never a running kvplan.
        fs::write(d.0.join(".rows.csv.lock"), "0\n").unwrap();
        fs::write(d.0.join(".rows.csv.0.3.tmp"), "point\n").unwrap();
        let c = claim(&[], &[("--out", &out)]).unwrap();
        let notes = c.notes().join("\n");
        assert!(
            notes.starts_with("--out: took over the stale lock file ")
                && notes.contains(".rows.csv.lock of process 0, which is no longer running"),
            "{notes}"
        );
        assert!(
            notes.contains(".rows.csv.0.3.tmp, left by a run that was killed"),
            "{notes}"
        );
        assert_eq!(c.notes().len(), 2);
        assert_eq!(d.names(), [".rows.csv.lock"]);
        let mine = fs::read_to_string(d.0.join(".rows.csv.lock")).unwrap();
        assert_eq!(mine, format!("{}\n", std::process::id()));
        drop(c);
        // A lock file that names no process (or this one) is taken over without a word.
        fs::write(d.0.join(".rows.csv.lock"), "").unwrap();
        assert!(claim(&[], &[("--out", &out)]).unwrap().notes().is_empty());
    }

    #[test]
    fn outputs_are_checked_before_anything_is_written() {
        let d = dir("check");
        let ok = d.0.join("ok.csv");
        let e = claim(&[], &[("--requests-csv", &ok), ("--plot", &d.0)]).unwrap_err();
        assert!(e.message().starts_with("--plot: ") && e.message().contains("directory"));
        let e = claim(&[], &[("--a", &ok), ("--b", &d.0.join("no/x.svg"))]).unwrap_err();
        assert!(e.message().contains("does not exist"), "{e}");
        let e = claim(&[], &[("--a", &ok), ("--b", &d.0.join("./ok.csv"))]).unwrap_err();
        assert!(e.message().contains("--a and --b"), "{e}");
        assert!(d.names().is_empty(), "{:?}", d.names());
    }
}
