//! Output files the user names (a trace, a profile, a sweep's rows); `what`, the label in
//! messages, is the caller's (the command line passes its flag).
//!
//! - A symlink is followed to its final target, which is written; the link stays a link. A
//!   dangling link creates its target.
//! - A regular file, or a path that does not exist yet, is written through a temporary file in
//!   the same directory and renamed into place: a failed write leaves nothing half-written and
//!   the old content intact.
//! - Anything else that exists (a FIFO, a character or block device, a socket) is opened and
//!   written directly: never replaced, never renamed over.
//! - A directory is an error.
//! - A temporary file is removed if the process gets SIGINT, SIGTERM or SIGHUP before it is
//!   renamed into place ([`crate::outputs`]); the old file stays as it was. One left by a
//!   process killed outright (SIGKILL) is removed by the next run that claims the same output
//!   ([`remove_orphaned_temps`]).

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use kvplan_vocab::timeline::{Run, write_chrome_trace, write_csv};

use crate::cleanup::{register_cleanup, settle};
use crate::error::Error;

/// Symlink hops followed to the target of a dangling link (Linux's own limit; loops are reported
/// by the OS before that).
const MAX_LINKS: usize = 40;

/// Writes the output file `path` for the option `what` (used in messages) with `fill`.
///
/// Problems with the path itself (a directory, a missing parent directory, a symlink loop) are
/// input errors (exit code 2); failures while opening, writing or renaming (a full disk, a
/// device that refuses the bytes) are failures (exit code 1). Every message names the path.
pub fn write_output(
    path: &Path,
    what: &str,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Error> {
    write_output_with(path, what, fill, |shown, e| {
        format!("{what}: cannot write {shown}: {e}")
    })
}

/// [`write_output`] with what `fill` returns, and `failed(shown path, error)` the message of a
/// failure.
fn write_output_with<T>(
    path: &Path,
    what: &str,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<T>,
    failed: impl Fn(&str, &io::Error) -> String,
) -> Result<T, Error> {
    let shown = |p: &Path| {
        if p == path {
            format!("'{}'", path.display())
        } else {
            format!(
                "'{}' (the target of symlink '{}')",
                p.display(),
                path.display()
            )
        }
    };
    let target = resolve(path)
        .map_err(|e| Error::Input(format!("{what}: cannot use '{}': {e}", path.display())))?;
    match target {
        Target::Directory(p) => Err(Error::Input(format!(
            "{what}: {} is a directory; give a file path",
            shown(&p)
        ))),
        Target::Special(m) => write_direct(path, fill).map_err(|e| {
            Error::Failure(failed(
                &format!("'{}' ({})", path.display(), kind_name(&m)),
                &e,
            ))
        }),
        Target::Replace(p, old) => {
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let name = p
                .file_name()
                .ok_or_else(|| Error::Input(format!("{what}: {} is not a file path", shown(&p))))?;
            if !dir.is_dir() {
                return Err(Error::Input(format!(
                    "{what}: cannot write {}: directory '{}' does not exist",
                    shown(&p),
                    dir.display()
                )));
            }
            write_replacing(dir, &name.to_string_lossy(), &p, old.as_ref(), fill)
                .map_err(|e| Error::Failure(failed(&shown(&p), &e)))
        }
    }
}

/// Opens the output file `path` for the option `what` to be written row by row in place, where a
/// run that is killed must leave what it wrote (`kvplan sweep` resuming its output file): no temporary
/// file. `keep` is how many bytes of an existing regular file to keep; without it the file is
/// truncated. The same checks and messages as [`write_output`]: a directory or a missing parent
/// directory is an input error; a FIFO or device is opened in place.
pub fn open_stream(path: &Path, what: &str, keep: Option<u64>) -> Result<File, Error> {
    let target = resolve(path)
        .map_err(|e| Error::Input(format!("{what}: cannot use '{}': {e}", path.display())))?;
    let fail =
        |e: io::Error| Error::Failure(format!("{what}: cannot write '{}': {e}", path.display()));
    match target {
        Target::Directory(p) => Err(Error::Input(format!(
            "{what}: '{}' is a directory; give a file path",
            p.display()
        ))),
        Target::Special(_) => OpenOptions::new().write(true).open(path).map_err(fail),
        Target::Replace(p, _) => {
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if !dir.is_dir() {
                return Err(Error::Input(format!(
                    "{what}: cannot write '{}': directory '{}' does not exist",
                    p.display(),
                    dir.display()
                )));
            }
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(keep.is_none())
                .open(&p)
                .map_err(fail)?;
            if let Some(n) = keep {
                use std::io::Seek;
                f.set_len(n).map_err(fail)?;
                f.seek(io::SeekFrom::End(0)).map_err(fail)?;
            }
            Ok(f)
        }
    }
}

/// Streams to the output file `path` (for the option `what`) or, without one, to stdout:
/// `write` writes, and what it returns is returned once the file is complete. With `keep`
/// (resuming), the first `keep` bytes of the file are kept (`Some(0)`: a file started afresh,
/// created if need be) and the rest written in place ([`open_stream`]), so that a killed run
/// leaves what it wrote; without it, the rows go to a temporary file renamed over `path` once
/// `write` succeeds, so the old file stays whole until the new one is (and stays, if the run
/// fails or is interrupted). A write that fails is a failure naming the file (or stdout).
pub fn stream_to<T>(
    path: Option<&Path>,
    what: &str,
    keep: Option<u64>,
    write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> Result<T, Error> {
    let failed = |shown: &str, e: &io::Error| format!("cannot write {shown}: {e}");
    let (result, shown) = match (path, keep) {
        (Some(p), None) => {
            return write_output_with(p, what, write, |_, e| {
                failed(&format!("'{}'", p.display()), e)
            });
        }
        (Some(p), Some(_)) => {
            let mut file = open_stream(p, what, keep)?;
            (write(&mut file), format!("'{}'", p.display()))
        }
        (None, _) => (write(&mut io::stdout().lock()), "stdout".to_string()),
    };
    result.map_err(|e| Error::Failure(failed(&shown, &e)))
}

/// Where an output path leads, symlinks followed.
pub(crate) enum Target {
    /// A directory (an error).
    Directory(PathBuf),
    /// An existing FIFO, device or socket: opened through the given path and written in place.
    Special(Metadata),
    /// A regular file (with its metadata) or a path where nothing exists yet: the final path,
    /// canonical when reached through a symlink, to be replaced whole.
    Replace(PathBuf, Option<Metadata>),
}

pub(crate) fn resolve(path: &Path) -> io::Result<Target> {
    match fs::metadata(path) {
        Ok(m) => {
            let linked = fs::symlink_metadata(path)?.file_type().is_symlink();
            let real = || {
                if linked {
                    fs::canonicalize(path)
                } else {
                    Ok(path.to_path_buf())
                }
            };
            Ok(if m.is_dir() {
                Target::Directory(real()?)
            } else if m.is_file() {
                Target::Replace(real()?, Some(m))
            } else {
                // Opened through `path` itself: the kernel follows the links, including the
                // ones under /proc that name no path (`/dev/stdout` on a pipe).
                Target::Special(m)
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Target::Replace(dangling(path)?, None)),
        Err(e) => Err(e),
    }
}

/// The path that a chain of symlinks ending nowhere points at (or `path` itself when it is not
/// a symlink), with its directory made canonical when that exists.
fn dangling(path: &Path) -> io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(e),
        }
    }
    if p != path
        && let (Some(dir), Some(name)) = (p.parent(), p.file_name())
        && let Ok(dir) = fs::canonicalize(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
    {
        p = dir.join(name);
    }
    Ok(p)
}

/// Writes a FIFO, device or socket in place: no temporary file, no rename, no truncation.
fn write_direct<T>(
    target: &Path,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> io::Result<T> {
    let f = OpenOptions::new().write(true).open(target)?;
    let mut w = BufWriter::new(f);
    let out = fill(&mut w)?;
    w.flush()?;
    Ok(out)
}

/// Writes a temporary file next to `target` and renames it over `target`; on any failure the
/// temporary file is removed and `target` is untouched.
fn write_replacing<T>(
    dir: &Path,
    name: &str,
    target: &Path,
    old: Option<&Metadata>,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> io::Result<T> {
    let (tmp, f) = create_temp(dir, name)?;
    let result = (|| -> io::Result<T> {
        if let Some(m) = old {
            // Keep the mode of the file being replaced.
            f.set_permissions(m.permissions())?;
        }
        let mut w = BufWriter::new(f);
        let out = fill(&mut w)?;
        w.flush()?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        settle(&tmp, || fs::rename(&tmp, target))?;
        Ok(out)
    })();
    if result.is_err() {
        settle(&tmp, || fs::remove_file(&tmp).ok());
    }
    result
}

/// Whether the temporary file name `file` is one [`create_temp`] makes for the file `name`
/// (`.NAME.PID.N.tmp`), and if so, the process id in it.
fn temp_pid(file: &str, name: &str) -> Option<u32> {
    let middle = file
        .strip_prefix('.')?
        .strip_prefix(name)?
        .strip_prefix('.')?
        .strip_suffix(".tmp")?;
    let (pid, n) = middle.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n)).then(|| pid.parse().ok())?
}

/// Whether the process `pid` may still be running: where `/proc` shows the processes (Linux),
/// whether it is there; elsewhere it cannot be told, and the answer is no.
fn may_be_running(pid: u32) -> bool {
    let proc = Path::new("/proc");
    proc.join("self").exists() && proc.join(pid.to_string()).exists()
}

/// Removes the temporary files that runs killed outright (SIGKILL, a crash, a power cut) left
/// beside the output file `target` (`.NAME.PID.N.tmp`, as [`write_output`] names them): those
/// of other processes that are no longer running. Call it only while holding the output's lock
/// ([`crate::outputs::claim`]), when no other kvplan can be writing it. Returns the files
/// removed; a file that cannot be removed (or a directory that cannot be read) is left alone.
pub fn remove_orphaned_temps(target: &Path) -> Vec<PathBuf> {
    let (Some(name), dir) = (target.file_name(), target.parent()) else {
        return Vec::new();
    };
    let name = name.to_string_lossy();
    let dir = match dir {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let ours = std::process::id();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = temp_pid(&file.to_string_lossy(), &name) else {
            continue;
        };
        let plain = entry.file_type().is_ok_and(|t| t.is_file());
        if pid == ours || !plain || may_be_running(pid) {
            continue;
        }
        let path = dir.join(&file);
        if fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
    }
    removed.sort();
    removed
}

/// A new temporary file in `dir`; `create_new` never opens something already there (a stale
/// file or a planted symlink).
fn create_temp(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    let pid = std::process::id();
    let mut n = 0u32;
    loop {
        let tmp = dir.join(format!(".{name}.{pid}.{n}.tmp"));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => {
                register_cleanup(&tmp);
                return Ok((tmp, f));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => return Err(e),
        }
    }
}

/// What a non-regular file is, for messages.
fn kind_name(m: &Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        if t.is_fifo() {
            return "a FIFO";
        } else if t.is_char_device() {
            return "a character device";
        } else if t.is_block_device() {
            return "a block device";
        } else if t.is_socket() {
            return "a socket";
        }
    }
    let _ = m;
    "not a regular file"
}

/// Writes `text` to the output file `path` for the option `what` ([`write_output`]).
pub fn write_text(path: &Path, what: &str, text: &str) -> Result<(), Error> {
    write_output(path, what, |w| w.write_all(text.as_bytes()))
}

/// Writes the timelines `runs` to `path` for the option `what`: CSV when the file name ends in
/// `.csv` (any case), else a Chrome trace (JSON, one process per run).
pub fn write_trace(path: &Path, what: &str, runs: &[Run]) -> Result<(), Error> {
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    write_output(path, what, |w| {
        if csv {
            write_csv(runs, w)
        } else {
            write_chrome_trace(runs, w)
        }
    })
}

/// Ends a fit's report `out`: writes `file` to `path` (the option `what`) and says so, or,
/// without a path, appends `section` (the fitted part of the profile) to the report.
pub fn write_or_print(
    mut out: String,
    path: Option<&Path>,
    what: &str,
    file: &str,
    section: &str,
) -> Result<String, Error> {
    match path {
        Some(path) => {
            write_text(path, what, file)?;
            out.push_str(&format!("\nwrote {}\n", path.display()));
        }
        None => {
            out.push('\n');
            out.push_str(section);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory for one test (`crate::test_dir`).
    fn dir(name: &str) -> crate::test_dir::Dir {
        crate::test_dir::Dir::new("kvplan-output", name)
    }

    fn hello(w: &mut dyn Write) -> io::Result<()> {
        w.write_all(b"hello\n")
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = dir("fail");
        let target = dir.0.join("out.json");
        let e = write_output(&target, "the trace", |w| {
            w.write_all(b"partial")?;
            Err(io::Error::other("boom"))
        })
        .unwrap_err();
        assert!(e.message().contains("boom"), "{e}");
        assert!(e.message().contains("out.json"), "{e}");
        assert!(!e.is_input());
        assert!(dir.names().is_empty(), "{:?}", dir.names());
    }

    #[test]
    fn failed_write_keeps_the_old_file() {
        let dir = dir("keep");
        let target = dir.0.join("out.csv");
        fs::write(&target, "old\n").unwrap();
        write_output(&target, "the trace", |_| Err(io::Error::other("boom"))).unwrap_err();
        assert_eq!(fs::read_to_string(&target).unwrap(), "old\n");
        assert_eq!(dir.names(), ["out.csv"]);
    }

    /// The real `/dev/null` and `/dev/full`, only looked at (never written): a character
    /// device is written in place, never replaced. `tests/cli/output.rs` writes private copies of
    /// them end to end where device nodes can be made (root and mknod: its ignored tests).
    #[cfg(target_os = "linux")]
    #[test]
    fn character_devices_are_written_in_place() {
        for dev in ["/dev/null", "/dev/full"] {
            match resolve(Path::new(dev)) {
                Ok(Target::Special(m)) => assert_eq!(kind_name(&m), "a character device"),
                Ok(_) => panic!("{dev} would be replaced or refused"),
                Err(e) => panic!("{dev}: {e}"),
            }
        }
    }

    #[test]
    fn regular_file_is_replaced_whole() {
        let dir = dir("regular");
        let target = dir.0.join("out.csv");
        fs::write(&target, "a much longer old content\n").unwrap();
        write_output(&target, "the output", hello).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "hello\n");
        assert_eq!(dir.names(), ["out.csv"]);
    }

    #[test]
    fn directory_is_an_input_error() {
        let dir = dir("isdir");
        let e = write_output(&dir.0, "the output", hello).unwrap_err();
        assert!(e.is_input());
        assert!(e.message().contains("is a directory"), "{e}");
    }

    #[test]
    fn missing_directory_is_an_input_error() {
        let dir = dir("nodir");
        let e = write_output(&dir.0.join("no/such/t.json"), "the trace", hello).unwrap_err();
        assert!(e.is_input());
        assert!(e.message().contains("no/such/t.json"), "{e}");
        assert!(e.message().contains("does not exist"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_written_through() {
        use std::os::unix::fs::symlink;
        let dir = dir("links");
        fs::create_dir(dir.0.join("real")).unwrap();
        // An existing target through a relative link, and through a chain of two links.
        fs::write(dir.0.join("real/a.json"), "old").unwrap();
        symlink("real/a.json", dir.0.join("a")).unwrap();
        symlink("a", dir.0.join("b")).unwrap();
        write_output(&dir.0.join("b"), "the trace", hello).unwrap();
        assert_eq!(
            fs::read_to_string(dir.0.join("real/a.json")).unwrap(),
            "hello\n"
        );
        for l in ["a", "b"] {
            assert!(
                fs::symlink_metadata(dir.0.join(l))
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
        }
        // A dangling link creates its target.
        symlink("real/new.csv", dir.0.join("c")).unwrap();
        write_output(&dir.0.join("c"), "the trace", hello).unwrap();
        assert_eq!(
            fs::read_to_string(dir.0.join("real/new.csv")).unwrap(),
            "hello\n"
        );
        assert!(
            fs::symlink_metadata(dir.0.join("c"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(dir.names(), ["a", "b", "c", "real"]);
        // A loop is an input error naming the path.
        symlink("loop2", dir.0.join("loop1")).unwrap();
        symlink("loop1", dir.0.join("loop2")).unwrap();
        let e = write_output(&dir.0.join("loop1"), "the trace", hello).unwrap_err();
        assert!(e.is_input());
        assert!(e.message().contains("loop1"), "{e}");
    }

    #[test]
    fn only_the_orphaned_temporary_files_of_the_target_are_removed() {
        let dir = dir("orphans");
        let target = dir.0.join("out.csv");
        let ours = std::process::id();
        for name in [
            ".out.csv.0.0.tmp".to_string(),        // a process that is gone
            ".out.csv.0.12.tmp".into(),            // its 13th
            format!(".out.csv.{ours}.0.tmp"),      // this process's own
            ".out.csv.fingerprint.0.0.tmp".into(), // another file's
            ".out.csv.x.0.tmp".into(),             // not a process id
            ".out.csv.0.tmp".into(),               // not a temporary file's name
            "out.csv".into(),
        ] {
            fs::write(dir.0.join(name), "x").unwrap();
        }
        let removed = remove_orphaned_temps(&target);
        assert_eq!(
            removed,
            [
                dir.0.join(".out.csv.0.0.tmp"),
                dir.0.join(".out.csv.0.12.tmp")
            ]
        );
        assert_eq!(dir.names().len(), 5, "{:?}", dir.names());
        // A process that is still running keeps its file (where /proc tells).
        if Path::new("/proc/self").exists() {
            let name = format!(".out.csv.{}.0.tmp", 1);
            fs::write(dir.0.join(&name), "x").unwrap();
            assert!(remove_orphaned_temps(&target).is_empty());
        }
        assert_eq!(temp_pid(".a.b.7.0.tmp", "a.b"), Some(7));
        assert_eq!(temp_pid(".a.b.7.0.tmp", "a"), None);
    }

    #[cfg(unix)]
    #[test]
    fn replacing_keeps_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir("mode");
        let target = dir.0.join("p.toml");
        fs::write(&target, "old").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o640)).unwrap();
        write_output(&target, "the output", hello).unwrap();
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }
}
