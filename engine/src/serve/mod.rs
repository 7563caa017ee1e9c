//! Serving many requests on one model: an engine thread runs an iteration-level continuous-batching
//! scheduler over a paged key/value pool with a prefix cache. Callers submit token prompts with
//! sampling parameters and receive tokens as events; no HTTP here (the web crate speaks the API).

mod blocks;
mod scheduler;
mod steps;

use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, AtomicUsize, Ordering},
        mpsc,
    },
    thread,
};

pub use scheduler::{Scheduler, holds_prompts};
pub use steps::{DecodeSteps, PromptSteps, StepGaps, StepTimes};

use crate::{
    error::{Error, Result},
    generate::StopReason,
    loader::LoadedModel,
    model::{KvType, PagedKv},
    sampling::SamplingParams,
};

/// How a serving engine runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// Sequences decoded together at most.
    pub max_batch: usize,
    /// Memory for the key/value pool, in bytes.
    pub kv_bytes: usize,
    /// Positions per key/value block (also the prefix cache's granularity).
    pub block_size: usize,
    /// How keys and values are stored.
    pub kv_type: KvType,
    /// Tokens run in one step at most (decode tokens plus prefill chunks).
    pub step_tokens: usize,
    /// Requests waiting for a slot at most; more are refused as over capacity.
    pub max_waiting: usize,
    /// Prompts wait for the decoding requests to finish while their summed wait is at most this
    /// many times the summed stall their prefill would cost those requests, so that prompts do not
    /// stall a batch about to finish (0, the default: prompts never wait for decodes). See
    /// [`holds_prompts`].
    pub drain_hold: f64,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            max_batch: 16,
            kv_bytes: 256 << 20,
            block_size: 16,
            kv_type: KvType::F16,
            step_tokens: 512,
            max_waiting: 256,
            drain_hold: 0.0,
        }
    }
}

/// Priority classes: lower is more urgent. First come, first served within a class.
pub type Priority = u8;

/// The default priority class.
pub const DEFAULT_PRIORITY: Priority = 1;

/// One request for the engine.
pub struct Request {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Sampling, stop strings and `max_tokens`.
    pub params: SamplingParams,
    /// Priority class.
    pub priority: Priority,
    /// Keep generating past end-of-turn tokens until `max_tokens` (benchmarks need exact lengths).
    pub ignore_eos: bool,
    /// Log-probabilities to report per token: `None` for none, `Some(n)` for the chosen token's and
    /// the `n` most likely alternatives.
    pub logprobs: Option<usize>,
    /// Where the request's events go.
    pub events: Box<dyn EventSink>,
}

/// Receives a request's events on the engine thread; must not block.
pub trait EventSink: Send {
    /// Delivers one event; `false` when the receiver is gone (the request is then cancelled).
    fn send(&mut self, event: Event) -> bool;
    /// Whether the receiver is gone.
    fn is_closed(&self) -> bool;
}

/// What happens to a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A generated token.
    Token(TokenOut),
    /// The request finished.
    Done(Finish),
    /// The request failed; no more events follow.
    Failed(String),
}

/// One generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenOut {
    /// Its id.
    pub id: u32,
    /// Text that became final with it (empty while a character or a possible stop string is
    /// incomplete).
    pub text: String,
    /// Its log-probability and the most likely alternatives, when asked for.
    pub logprob: Option<TokenLogprob>,
}

/// A token's log-probability and the most likely tokens at its position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// Log-probability of the chosen token.
    pub logprob: f32,
    /// The most likely tokens with their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    /// Text not yet delivered with a token (held back while it could have begun a stop string).
    pub text: String,
    /// Why it stopped.
    pub reason: StopReason,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Prompt tokens whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
    /// Times the request was preempted and recomputed.
    pub preemptions: usize,
}

/// Why a request was refused at the door.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The request itself is wrong.
    #[error("{0}")]
    Invalid(String),
    /// Too many requests wait already.
    #[error("the engine is over capacity: {waiting} requests are waiting")]
    Overloaded {
        /// Requests waiting.
        waiting: usize,
    },
    /// The engine has stopped.
    #[error("the engine has stopped")]
    Stopped,
}

/// Counters and gauges of a running engine, read without locks, and its step timings.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Requests waiting for a slot.
    pub waiting: AtomicUsize,
    /// Sequences in the running batch.
    pub running: AtomicUsize,
    /// Key/value blocks in the pool.
    pub kv_blocks_total: AtomicUsize,
    /// Blocks some sequence uses.
    pub kv_blocks_used: AtomicUsize,
    /// Blocks only the prefix cache holds.
    pub kv_blocks_cached: AtomicUsize,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_lookup_tokens: AtomicU64,
    /// Prompt tokens found there.
    pub prefix_hit_tokens: AtomicU64,
    /// Prompt tokens computed (cache hits excluded, recomputation included).
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Sequences preempted for lack of key/value memory.
    pub preemptions: AtomicU64,
    /// Forward steps run.
    pub steps: AtomicU64,
    /// Requests finished (any reason, cancellations included).
    pub finished: AtomicU64,
    /// How long the steps took by what they ran (a lock the scheduler takes once a step).
    step_times: Mutex<StepTimes>,
}

impl EngineStats {
    /// Share of looked-up prompt tokens found in the prefix cache (0 before any lookup).
    pub fn prefix_hit_rate(&self) -> f64 {
        let lookups = self.prefix_lookup_tokens.load(Ordering::Relaxed);
        if lookups == 0 {
            return 0.0;
        }
        self.prefix_hit_tokens.load(Ordering::Relaxed) as f64 / lookups as f64
    }

    /// A copy of the step timings so far.
    pub fn step_times(&self) -> StepTimes {
        self.step_times_mut().clone()
    }

    /// The step timings, to record into (a panic elsewhere leaves sums that are still sums).
    pub(crate) fn step_times_mut(&self) -> std::sync::MutexGuard<'_, StepTimes> {
        self.step_times
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

enum Command {
    Submit(Request),
    Shutdown,
}

/// A serving engine: one model, one scheduler thread. Cheap to share behind an `Arc`.
pub struct Engine {
    commands: mpsc::Sender<Command>,
    stats: Arc<EngineStats>,
    model: Arc<LoadedModel>,
    config: ServeConfig,
    n_blocks: usize,
    thread: std::sync::Mutex<Option<thread::JoinHandle<()>>>,
}

impl Engine {
    /// Starts the scheduler thread for `model`.
    ///
    /// # Errors
    /// When the configuration is unusable (no batch, a key/value budget below one block).
    pub fn start(model: Arc<LoadedModel>, config: ServeConfig) -> Result<Self> {
        let c = model.model.config();
        if config.max_batch == 0 || config.step_tokens == 0 || config.block_size == 0 {
            return Err(Error::InvalidRequest(
                "max batch, step tokens and block size must be at least 1".into(),
            ));
        }
        if !(config.drain_hold >= 0.0 && config.drain_hold.is_finite()) {
            return Err(Error::InvalidRequest(format!(
                "the drain hold must be a finite number of at least 0, not {}",
                config.drain_hold
            )));
        }
        let block_bytes = PagedKv::block_bytes(c, config.block_size, config.kv_type);
        let n_blocks = config.kv_bytes / block_bytes;
        if n_blocks == 0 {
            return Err(Error::InvalidRequest(format!(
                "a key/value budget of {} bytes holds no block of {block_bytes} bytes",
                config.kv_bytes
            )));
        }
        let stats = Arc::new(EngineStats::default());
        let pool = PagedKv::new(c, n_blocks, config.block_size, config.kv_type);
        let scheduler = Scheduler::new(model.clone(), pool, config.clone(), stats.clone());
        let (commands, inbox) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("strata-scheduler".into())
            .spawn(move || run(scheduler, inbox))
            .map_err(|e| {
                Error::InvalidRequest(format!("cannot start the scheduler thread: {e}"))
            })?;
        Ok(Self {
            commands,
            stats,
            model,
            config,
            n_blocks,
            thread: std::sync::Mutex::new(Some(thread)),
        })
    }

    /// The model served.
    pub fn model(&self) -> &Arc<LoadedModel> {
        &self.model
    }

    /// The configuration it runs.
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// Blocks in the key/value pool.
    pub fn kv_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Live counters.
    pub fn stats(&self) -> &Arc<EngineStats> {
        &self.stats
    }

    /// Checks `request` and queues it; its events arrive through its sink.
    ///
    /// # Errors
    /// [`SubmitError::Invalid`] for an empty or too long prompt, ids outside the vocabulary or bad
    /// sampling parameters; [`SubmitError::Overloaded`] when the waiting queue is full;
    /// [`SubmitError::Stopped`] after shutdown.
    pub fn submit(&self, request: Request) -> std::result::Result<(), SubmitError> {
        self.check(&request)?;
        let waiting = self.stats.waiting.load(Ordering::Relaxed);
        if waiting >= self.config.max_waiting {
            return Err(SubmitError::Overloaded { waiting });
        }
        self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        self.commands
            .send(Command::Submit(request))
            .map_err(|_| SubmitError::Stopped)
    }

    fn check(&self, request: &Request) -> std::result::Result<(), SubmitError> {
        let c = self.model.model.config();
        let invalid = |m: String| Err(SubmitError::Invalid(m));
        if request.prompt.is_empty() {
            return invalid("the prompt is empty".into());
        }
        if let Some(bad) = request.prompt.iter().find(|&&t| t as usize >= c.vocab_size) {
            return invalid(format!(
                "token id {bad} is outside the vocabulary of {} tokens",
                c.vocab_size
            ));
        }
        if let Err(e) = request.params.validate() {
            return invalid(e.to_string());
        }
        let positions = request.prompt.len() + request.params.max_tokens;
        if positions > c.context_length {
            return invalid(format!(
                "this model's maximum context length is {} tokens; the request asks for {} \
                 ({} in the prompt, {} to generate)",
                c.context_length,
                positions,
                request.prompt.len(),
                request.params.max_tokens
            ));
        }
        let blocks = positions.div_ceil(self.config.block_size);
        if blocks > self.n_blocks {
            return invalid(format!(
                "the request needs {positions} key/value positions; the engine's key/value memory \
                 holds {}",
                self.n_blocks * self.config.block_size
            ));
        }
        Ok(())
    }

    /// Stops the scheduler: waiting and running requests get a failure event.
    pub fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown);
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The scheduler thread: take requests, step while there is work, sleep on the inbox when idle.
fn run(mut scheduler: Scheduler, inbox: mpsc::Receiver<Command>) {
    loop {
        let first = if scheduler.is_idle() {
            match inbox.recv() {
                Ok(command) => Some(command),
                Err(_) => return,
            }
        } else {
            None
        };
        for command in first.into_iter().chain(inbox.try_iter()) {
            match command {
                Command::Submit(request) => scheduler.add(request),
                Command::Shutdown => {
                    scheduler.fail_all("the engine is shutting down");
                    return;
                }
            }
        }
        let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scheduler.step()));
        if step.is_err() {
            tracing::error!("an engine step panicked; failing the requests in it");
            scheduler.fail_running("internal engine error");
        }
    }
}
