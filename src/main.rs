//! The `kvplan` binary: parse the command line, run its command ([`kvplan::run`]), print the
//! answer and the notes, exit with the code the answer carries.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

use kvplan::error::{self, EXIT_INPUT};
use kvplan::{Cli, messages, run};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                    ExitCode::from(EXIT_INPUT as u8)
                }
                _ => {
                    // clap's first line names the flag and the problem; the usage block after it
                    // is noise for a one-line error.
                    // A list under the first line (the required arguments not given) belongs to it.
                    let text = e.render().to_string();
                    let mut lines = text.lines();
                    let first = lines.next().unwrap_or("error: invalid arguments");
                    let listed: Vec<&str> = (lines.map_while(|l| l.strip_prefix("  ")))
                        .map(str::trim)
                        .collect();
                    let sep = if listed.is_empty() { "" } else { " " };
                    eprintln!("{first}{sep}{} (see --help)", listed.join(", "));
                    ExitCode::from(EXIT_INPUT as u8)
                }
            };
        }
    };
    let result = run(&cli);
    // Notes about the settings go out once the run has succeeded (or has its output, as a
    // regression check that fails does), never before an error of the same run.
    if result
        .as_ref()
        .map_or_else(|e| e.stdout.is_some(), |_| true)
    {
        for note in messages::take_notes() {
            eprintln!("note: {note}");
        }
    }
    match result {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(out.as_bytes())
                .and_then(|_| stdout.flush())
            {
                Ok(()) => ExitCode::SUCCESS,
                // A closed pipe (`| head`) is not an error worth a message.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write output: {e}");
                    ExitCode::from(error::EXIT_FAILURE as u8)
                }
            }
        }
        Err(e) => {
            if let Some(out) = &e.stdout {
                let _ = std::io::stdout().lock().write_all(out.as_bytes());
            }
            eprintln!("error: {}", messages::flags_in_text(&e.message));
            ExitCode::from(e.code as u8)
        }
    }
}
