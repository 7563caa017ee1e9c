//! `strata serve`: load a model and serve it over the OpenAI API with continuous batching.

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context;
use clap::Args;
use strata_engine::{
    loader::LoadedModel,
    model::{KvType, LoadOptions},
    placement::Placement,
    serve::{Engine, ServeConfig},
    weights::WeightType,
};
use strata_web::server::{self, ServerOptions};

use super::{GlobalArgs, generate::resolve_model, listen::ListenerArgs};

/// Arguments of `strata serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// A GGUF file, a Hugging Face folder, or the name of a cached model (pulled if missing).
    #[arg(long, value_name = "PATH|NAME")]
    model: String,
    /// Runtime weight type [default: the file's own types].
    #[arg(long, value_name = "f32|f16|bf16|q8_0|q4_0|q4_1")]
    weights: Option<WeightType>,
    /// Engine threads [default: one per core].
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// NUMA placement: none, pin (each worker on one CPU), interleave (memory over every node) or
    /// node=N (workers and memory on node N).
    #[arg(long, value_name = "POLICY", default_value = "none")]
    numa: Placement,
    /// Sequences decoded together at most.
    #[arg(long, default_value_t = 16)]
    max_batch: usize,
    /// Memory for the key/value cache, in MiB.
    #[arg(long, value_name = "MiB", default_value_t = 256)]
    kv_mem: usize,
    /// Key/value storage type.
    #[arg(long, value_name = "f16|f32", default_value = "f16", value_parser = parse_kv)]
    kv_type: KvType,
    /// Positions per key/value block.
    #[arg(long, default_value_t = 16)]
    block_size: usize,
    /// Tokens per scheduler step at most (decode tokens plus prefill chunks).
    #[arg(long, default_value_t = 512)]
    step_tokens: usize,
    /// Requests allowed to wait for a slot; more get 429.
    #[arg(long, default_value_t = 256)]
    max_waiting: usize,
    /// Prompts wait for the decoding requests to finish while their summed wait is at most this many
    /// times the summed stall their prefill would cost those requests (0: never). A hold trades
    /// some first-token time for ends that later prompts do not stall.
    #[arg(long, value_name = "FACTOR", default_value_t = 0.0)]
    drain_hold: f64,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on /v1 routes.
    #[arg(long, env = "STRATA_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The model name clients use [default: the model argument's file stem or name].
    #[arg(long)]
    served_model_name: Option<String>,
    #[command(flatten)]
    listener: ListenerArgs,
    /// Exit when standard input closes: a supervising process (the profiler) that dies takes its
    /// servers with it.
    #[arg(long, hide = true)]
    exit_with_stdin: bool,
}

fn parse_kv(s: &str) -> Result<KvType, String> {
    match s {
        "f16" => Ok(KvType::F16),
        "f32" => Ok(KvType::F32),
        other => Err(format!("unknown key/value type `{other}` (f16 or f32)")),
    }
}

impl ServeArgs {
    /// Runs the server until Ctrl-C or SIGTERM.
    pub(crate) fn run(self, _global: &GlobalArgs) -> anyhow::Result<()> {
        if self.exit_with_stdin {
            exit_when_stdin_closes();
        }
        let path = resolve_model(&self.model)?;
        let options = LoadOptions {
            weights: self.weights,
            threads: self.threads,
            placement: self.numa,
        };
        let loaded = LoadedModel::open(&path, options)
            .with_context(|| format!("loading {}", path.display()))?;
        let served = self.served_model_name.clone().unwrap_or_else(|| {
            std::path::Path::new(&self.model)
                .file_stem()
                .map_or_else(|| self.model.clone(), |s| s.to_string_lossy().into_owned())
        });
        let config = ServeConfig {
            max_batch: self.max_batch,
            kv_bytes: self.kv_mem << 20,
            block_size: self.block_size,
            kv_type: self.kv_type,
            step_tokens: self.step_tokens,
            max_waiting: self.max_waiting,
            drain_hold: self.drain_hold,
        };
        let engine = Arc::new(Engine::start(Arc::new(loaded), config)?);
        let mut server_options = ServerOptions::new(served.clone());
        server_options.api_key = self.api_key.clone();
        server_options.placement = engine.model().model.placement().to_string();
        let router = server::router(engine.clone(), server_options)?;
        let runtime = super::runtime(super::Workers::Two)?;
        runtime.block_on(async {
            let addr = SocketAddr::new(self.host, self.port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr}"))?;
            let bound = listener.local_addr()?;
            let model = &engine.model().model;
            tracing::info!(
                model = %served,
                weights = %model.weight_mix(),
                threads = model.threads(),
                placement = %model.placement(),
                kv_blocks = engine.kv_blocks(),
                "serving on http://{bound}"
            );
            // A line on stdout that scripts and tests wait for.
            println!("listening on http://{bound}");
            strata_web::listener::serve(
                listener,
                router,
                self.listener.limits(),
                shutdown_signal(),
            )
            .await;
            anyhow::Ok(())
        })?;
        engine.shutdown();
        Ok(())
    }
}

/// Resolves on Ctrl-C or SIGTERM.
/// Exits the process once standard input closes: the supervising process (which holds the other end)
/// is gone, so nothing outlives it.
pub(crate) fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        tracing::info!("standard input closed: the supervising process is gone; exiting");
        std::process::exit(0);
    });
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
