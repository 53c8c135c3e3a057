//! Files to remove if the process is interrupted (SIGINT, SIGTERM, SIGHUP): temporary files not
//! yet renamed into place (`files`) and the lock files of a run's claimed outputs (`outputs`).
//! The ground floor of the crate's file handling: it imports neither.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};

/// Files to remove if the process is interrupted: temporary files not yet renamed into place
/// and the lock files of [`claim`](crate::outputs::claim).
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

fn pending() -> MutexGuard<'static, Vec<PathBuf>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes `path` if the process gets SIGINT, SIGTERM or SIGHUP before it is settled
/// ([`settle`]: renamed into place or removed); the first call installs the handler, which
/// removes every such file and exits with 128 + the signal's number.
pub fn register_cleanup(path: &Path) {
    install_handler();
    pending().push(path.to_path_buf());
}

/// Runs `f` (a rename into place, a removal) where no interrupt can remove files halfway
/// through it, then forgets `path`.
pub(crate) fn settle<T>(path: &Path, f: impl FnOnce() -> T) -> T {
    let mut guard = pending();
    let out = f();
    guard.retain(|p| p != path);
    out
}

fn install_handler() {
    HANDLER.call_once(|| {
        #[cfg(unix)]
        {
            use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
            let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
            else {
                return;
            };
            let _ = std::thread::Builder::new()
                .name("kvplan-signals".into())
                .spawn(move || {
                    if let Some(signal) = signals.forever().next() {
                        // Held until the process is gone: nothing is renamed into place after
                        // its temporary file is removed.
                        let files = pending();
                        for p in files.iter() {
                            let _ = fs::remove_file(p);
                        }
                        eprintln!("kvplan: interrupted; no output file was replaced");
                        std::process::exit(128 + signal);
                    }
                });
        }
    });
}
