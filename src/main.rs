//! The `strata` command line: each subcommand calls into the workspace crates.

mod cli;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let verbose = cli.global.verbose;
    init_logging(verbose);
    match cli.command.run(&cli.global) {
        Ok(code) => code,
        Err(err) => {
            report(&err, verbose);
            ExitCode::FAILURE
        }
    }
}

/// Prints an error and its causes to stderr; `-v` adds anyhow's debug form (with a backtrace when
/// `RUST_BACKTRACE` asks for one).
fn report(err: &anyhow::Error, verbose: u8) {
    if verbose > 0 {
        eprintln!("Error: {err:?}");
        return;
    }
    eprintln!("Error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

/// Logs go to stderr. `RUST_LOG` wins when set; otherwise `info`, with Strata's own crates at `debug`
/// for `-v` and `trace` for `-vv`.
fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "info".to_owned(),
        n => {
            let level = if n == 1 { "debug" } else { "trace" };
            [
                "strata",
                "strata_engine",
                "strata_planner",
                "strata_controller",
                "strata_web",
            ]
            .iter()
            .fold("info".to_owned(), |acc, krate| {
                format!("{acc},{krate}={level}")
            })
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
