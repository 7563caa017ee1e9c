//! Argument parsing and dispatch. Each subcommand group lives in its own file with its own `run`.

mod bench;
mod dashboard;
mod gateway;
mod generate;
mod listen;
mod model;
mod pilot;
mod plan;
mod profile;
mod serve;
mod store;
mod worker;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

/// How many worker threads a subcommand's async runtime gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workers {
    /// None: the calling thread runs everything (commands that only talk to the store).
    CallerOnly,
    /// Two (commands that drive an engine or a load generator beside their own work).
    Two,
    /// One per core (long-running servers).
    PerCore,
}

/// The async runtime a subcommand runs on, with I/O and timers enabled.
pub(crate) fn runtime(workers: Workers) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = match workers {
        Workers::CallerOnly => tokio::runtime::Builder::new_current_thread(),
        Workers::Two | Workers::PerCore => tokio::runtime::Builder::new_multi_thread(),
    };
    if workers == Workers::Two {
        builder.worker_threads(2);
    }
    builder
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Decide where LLM inference should run, and run it there.
#[derive(Debug, Parser)]
#[command(name = "strata", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options that every subcommand accepts.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// The store: a `postgres://` or `sqlite:` URL.
    #[arg(
        long,
        global = true,
        env = "STRATA_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) database_url: Option<String>,
    /// Log more: `-v` for debug, `-vv` for trace (RUST_LOG overrides).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Measure prompt-processing and generation throughput, llama-bench style.
    Bench(bench::BenchArgs),
    /// Serve the dashboard: configs, runs, plans, pilots and the gateway, with a JSON API.
    Dashboard(dashboard::DashboardArgs),
    /// Route OpenAI requests between CPU pools and GPU fallbacks by SLA class and budget.
    Gateway(gateway::GatewayArgs),
    /// Generate text from a prompt with the engine, then print speed figures.
    Generate(generate::GenerateArgs),
    /// Fetch, list and locate model files in the local cache.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Evaluate moving a workload to CPU: profile, gate quality, plan, replay, and answer with a verdict
    /// (exit status 0 migrate, 3 partial, 4 stay).
    Pilot(pilot::PilotArgs),
    /// Plan CPU instances and GPU fallback hour by hour for a workload, and record the plan.
    Plan(plan::PlanArgs),
    /// Measure configs under load (a sweep of local engine configs, or any OpenAI endpoint) and store
    /// the results.
    Profile(profile::ProfileArgs),
    /// Serve a model over the OpenAI API with continuous batching.
    Serve(serve::ServeArgs),
    /// Claim profiling jobs queued with `strata profile --enqueue` and run them.
    Worker(worker::WorkerArgs),
    /// Inspect the store (PostgreSQL or the embedded SQLite file).
    #[command(subcommand)]
    Store(store::StoreCommand),
}

impl Command {
    /// Runs the subcommand; its exit status on success (a pilot's is its verdict).
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
        let done = match self {
            Command::Pilot(args) => return args.run(global),
            Command::Bench(args) => args.run(global),
            Command::Dashboard(args) => args.run(global),
            Command::Gateway(args) => args.run(global),
            Command::Generate(args) => args.run(global),
            Command::Model(cmd) => cmd.run(global),
            Command::Plan(args) => args.run(global),
            Command::Profile(args) => args.run(global),
            Command::Serve(args) => args.run(global),
            Command::Store(cmd) => cmd.run(global),
            Command::Worker(args) => args.run(global),
        };
        done.map(|()| ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
