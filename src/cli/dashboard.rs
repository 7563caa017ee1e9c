//! `strata dashboard`: serve the dashboard (pages and JSON API) from the store until interrupted.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Args;

use super::{GlobalArgs, listen::ListenerArgs, store};

/// Options of `strata dashboard`.
#[derive(Debug, Args)]
pub(crate) struct DashboardArgs {
    /// The address to listen on; port 0 picks a free port (the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    bind: SocketAddr,
    #[command(flatten)]
    listener: ListenerArgs,
}

impl DashboardArgs {
    /// Runs the subcommand.
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<()> {
        super::runtime(super::Workers::PerCore)?.block_on(self.serve(global))
    }

    async fn serve(self, global: &GlobalArgs) -> anyhow::Result<()> {
        let (url, store) = store::open(global).await?;
        let listener = tokio::net::TcpListener::bind(self.bind)
            .await
            .with_context(|| format!("listening on {}", self.bind))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        tracing::info!(store = %url, "dashboard ready");
        // Tests and scripts read this line to find the port.
        println!("dashboard listening on http://{addr}");
        let app = strata_web::dashboard::router(store.clone());
        let shutdown = async {
            tokio::signal::ctrl_c().await.ok();
        };
        strata_web::listener::serve(listener, app, self.listener.limits(), shutdown).await;
        store.close().await;
        Ok(())
    }
}
