//! `strata store ...`: open the store (applying migrations) and show what it holds, or check that its
//! schema is current without changing it.

use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use strata_controller::{
    planning,
    store::{self, JobStatus, Store},
};

use super::GlobalArgs;

/// Store subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Open the store (creating and migrating it if needed) and count what it holds.
    Status,
    /// Exit 0 when the store's schema is current, else list the pending migrations and exit 1;
    /// never migrates (processes of a deployment wait with it for the one migration job).
    Check,
}

impl StoreCommand {
    /// Runs the subcommand.
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<()> {
        let runtime = super::runtime(super::Workers::CallerOnly)?;
        match self {
            StoreCommand::Status => runtime.block_on(status(global)),
            StoreCommand::Check => runtime.block_on(check(global)),
        }
    }
}

/// The store named by `--database-url` / `STRATA_DATABASE_URL`, else the embedded SQLite file.
pub(crate) async fn open(global: &GlobalArgs) -> anyhow::Result<(String, Arc<dyn Store>)> {
    let url = match &global.database_url {
        Some(url) => url.clone(),
        None => store::default_database_url().context("locating the default SQLite store")?,
    };
    let shown = redact(&url);
    let store = store::open(&url)
        .await
        .with_context(|| format!("opening the store at {shown}"))?;
    // On first use the store gets the builtin catalog's prices, so that everything that costs configs
    // (the dashboard among them) has prices with no extra step.
    let prices = planning::record_builtin_prices(&*store)
        .await
        .with_context(|| {
            format!("recording the builtin catalog's prices in the store at {shown}")
        })?;
    if prices.inserted > 0 {
        tracing::info!(
            inserted = prices.inserted,
            "recorded the builtin catalog's prices in the store"
        );
    }
    Ok((shown, store))
}

async fn check(global: &GlobalArgs) -> anyhow::Result<()> {
    let url = match &global.database_url {
        Some(url) => url.clone(),
        None => store::default_database_url().context("locating the default SQLite store")?,
    };
    let shown = redact(&url);
    let pending = store::pending_migrations(&url)
        .await
        .with_context(|| format!("reading the schema of the store at {shown}"))?;
    if !pending.is_empty() {
        anyhow::bail!(
            "the store at {shown} has {} migrations pending: {}",
            pending.len(),
            pending.join(", ")
        );
    }
    println!("store     {shown}: schema current");
    Ok(())
}

async fn status(global: &GlobalArgs) -> anyhow::Result<()> {
    let (url, store) = open(global).await?;
    println!(
        "store     {url} ({:?}, migrations applied)",
        store.backend()
    );
    println!("models    {}", store.list_models().await?.len());
    println!("hardware  {}", store.list_hardware().await?.len());
    let workloads = store.list_workloads().await?;
    let mut plans = 0;
    for workload in &workloads {
        plans += store.list_plans_for_workload(workload.id).await?.len();
    }
    println!("workloads {}", workloads.len());
    println!("plans     {plans}");
    println!("prices    {}", store.list_catalog_prices(None).await?.len());
    println!("endpoints {}", store.list_endpoints().await?.len());
    println!(
        "jobs      {} queued",
        store
            .list_profile_jobs(Some(JobStatus::Queued))
            .await?
            .len()
    );
    for model in store.list_models().await? {
        println!(
            "  model {:<24} {:>12} bytes  {}",
            model.name, model.size_bytes, model.path
        );
    }
    store.close().await;
    Ok(())
}

/// A URL with any password replaced, for printing.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((credentials, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            redact("postgres://strata:secret@db:5432/strata"),
            "postgres://strata:***@db:5432/strata"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1/test"),
            "postgres://postgres@127.0.0.1/test"
        );
        assert_eq!(redact("sqlite:/tmp/s.db"), "sqlite:/tmp/s.db");
    }
}
