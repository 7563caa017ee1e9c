//! `strata gateway`: the OpenAI-compatible gateway that routes requests between CPU pools and GPU
//! fallback endpoints by SLA class, budget and the stored plan.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context;
use clap::Args;
use strata_controller::store;
use strata_web::gateway::{
    self, LazyStore,
    accounting::{Sink, SourcedSink},
    config::{Env, GatewayConfig},
};

use super::{
    GlobalArgs,
    serve::{exit_when_stdin_closes, shutdown_signal},
};

/// Arguments of `strata gateway`.
#[derive(Debug, Args)]
pub(crate) struct GatewayArgs {
    /// The gateway's TOML file (pools, SLA classes, budget, keys).
    #[arg(long, value_name = "GATEWAY.toml")]
    config: PathBuf,
    /// Override the config's listen address.
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<std::net::SocketAddr>,
    /// Keep accounting in memory only: no store, no plan.
    #[arg(long)]
    no_store: bool,
    /// Record decisions under this source instead of as live traffic, and leave the budget ledger
    /// alone (`strata pilot` replays its sample as `pilot:WORKLOAD`).
    #[arg(long, value_name = "NAME", conflicts_with = "no_store")]
    decision_source: Option<String>,
    /// Check the config and exit.
    #[arg(long)]
    check: bool,
    /// Exit when standard input closes (for a supervising process such as the pilot).
    #[arg(long, hide = true)]
    exit_with_stdin: bool,
}

impl GatewayArgs {
    /// Runs the gateway until Ctrl-C or SIGTERM, then drains in-flight requests and flushes accounting.
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(&self.config)
            .with_context(|| format!("reading {}", self.config.display()))?;
        let mut config = GatewayConfig::from_toml(&text, &Env)
            .with_context(|| format!("{}", self.config.display()))?;
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if self.check {
            let stored = config.pools.iter().filter(|p| p.profile.is_some()).count();
            println!(
                "{}: {} pools ({stored} with service models read from the store at start), {} SLA \
                 classes, {} keys: valid",
                self.config.display(),
                config.pools.len(),
                config.classes.len(),
                config.api_keys.len()
            );
            return Ok(());
        }
        if self.exit_with_stdin {
            exit_when_stdin_closes();
        }
        let sink: Option<Arc<dyn Sink>> = if self.no_store {
            None
        } else {
            let url = match &global.database_url {
                Some(url) => url.clone(),
                None => {
                    store::default_database_url().context("locating the default SQLite store")?
                }
            };
            let store: Arc<dyn Sink> = Arc::new(LazyStore::new(url));
            match self.decision_source.as_deref().map(str::trim) {
                Some("") => anyhow::bail!("--decision-source must not be empty"),
                Some(source) => Some(Arc::new(SourcedSink::new(store, source))),
                None => Some(store),
            }
        };
        let runtime = super::runtime(super::Workers::PerCore)?;
        runtime.block_on(gateway::run(
            config,
            sink,
            Some(self.config.clone()),
            shutdown_signal(),
        ))?;
        Ok(())
    }
}
