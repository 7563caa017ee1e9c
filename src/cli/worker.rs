//! `strata worker`: claim profiling jobs from the store and run them, renewing each job's lease.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use strata_controller::{
    hardware,
    worker::{self, JobEvent, WorkerOptions},
};

use super::GlobalArgs;

/// Arguments of `strata worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// This worker's name in the store [default: host name and process id].
    #[arg(long)]
    name: Option<String>,
    /// Seconds a claim holds without renewal; a job whose worker died is taken over after this.
    #[arg(long, default_value_t = 60)]
    lease_secs: u64,
    /// Exit when no job is left instead of waiting for more.
    #[arg(long)]
    exit_when_idle: bool,
}

impl WorkerArgs {
    /// Runs the worker.
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<()> {
        let runtime = super::runtime(super::Workers::Two)?;
        runtime.block_on(async {
            let (url, store) = super::store::open(global).await?;
            let hardware = hardware::ensure_recorded(store.as_ref()).await?;
            let host = std::fs::read_to_string("/etc/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "host".into());
            let options = WorkerOptions {
                name: self
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("{host}-{}", std::process::id())),
                lease: Duration::from_secs(self.lease_secs.max(1)),
                exit_when_idle: self.exit_when_idle,
                poll: Duration::from_secs(2),
                exe: std::env::current_exe().context("locating the strata binary")?,
                engine_version: env!("CARGO_PKG_VERSION").to_owned(),
            };
            tracing::info!(worker = %options.name, store = %url, "working off profiling jobs");
            let done = worker::work(store.clone(), &hardware, &options, |event| match event {
                JobEvent::Claimed(id, settings) => println!("claimed job {id}: {settings}"),
                JobEvent::Done(id) => println!("done job {id}"),
                JobEvent::Failed(id, error) => println!("failed job {id}: {error}"),
                JobEvent::LeaseLost(id) => println!("lost job {id} to another worker"),
            })
            .await?;
            store.close().await;
            println!("{done} jobs finished by this worker");
            anyhow::Ok(())
        })
    }
}
