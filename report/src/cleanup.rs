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
/// What the handler says on stderr, if not the default ([`set_interrupt_message`]).
static MESSAGE: Mutex<Option<String>> = Mutex::new(None);

/// What to say on stderr if the process is interrupted (instead of "no output file was
/// replaced"): a run that writes its output in place (`kvplan sweep` resuming a file) says where its
/// rows are and how to finish. Installs the handler.
pub fn set_interrupt_message(text: String) {
    install_handler();
    *MESSAGE.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
}

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
                        let message = MESSAGE.lock().unwrap_or_else(|e| e.into_inner()).take();
                        eprintln!(
                            "kvplan: interrupted; {}",
                            message.as_deref().unwrap_or("no output file was replaced")
                        );
                        std::process::exit(128 + signal);
                    }
                });
        }
    });
}
