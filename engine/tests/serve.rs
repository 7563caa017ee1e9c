//! The serving engine on a tiny random model: batched outputs equal one-at-a-time outputs (also when
//! the key/value pool is so small that sequences are preempted, and for a model with sliding-window
//! layers), prefixes are reused, cancelled requests give their memory back, bad requests are
//! refused at the door, the time between steps is summed only while requests run, and a drain hold
//! lets decoding requests finish before a prompt runs, then prefills the prompts it held before
//! those that came during it.

use std::{
    collections::VecDeque,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::Duration,
};

use strata_engine::{
    format::{
        gguf::GgufFile,
        gguf_writer::{TinyLlama, tiny_llama_gguf},
    },
    generate::generate,
    loader::{LoadedModel, ModelFormat},
    model::{KvType, Llama, LlamaConfig, LoadOptions, PagedKv},
    sampling::SamplingParams,
    serve::{DEFAULT_PRIORITY, Engine, Event, EventSink, Request, ServeConfig, SubmitError},
    tokenizer::Tokenizer,
    weights::WeightType,
};

fn tiny() -> Arc<LoadedModel> {
    loaded(tiny_llama_gguf(3, WeightType::Q8_0))
}

/// A tiny random Gemma 3 whose first layer of every two slides over 8 positions.
fn tiny_gemma() -> Arc<LoadedModel> {
    let shape = TinyLlama {
        architecture: "gemma3",
        head_dim: Some(32),
        sliding_window: Some((8, 2)),
        tied_embeddings: true,
        ..TinyLlama::default()
    };
    loaded(shape.writer(3, WeightType::Q8_0).to_bytes())
}

fn loaded(bytes: Vec<u8>) -> Arc<LoadedModel> {
    let file = GgufFile::from_bytes(Path::new("tiny.gguf"), bytes).expect("parses");
    let config = LlamaConfig::from_gguf(&file).expect("config");
    let tokenizer = Tokenizer::from_gguf(&file).expect("tokenizer");
    let model = Llama::load(
        config,
        &file,
        LoadOptions {
            weights: None,
            threads: 2,
            placement: Default::default(),
        },
    )
    .expect("loads");
    Arc::new(LoadedModel {
        model,
        tokenizer,
        format: ModelFormat::Gguf,
        path: PathBuf::from("tiny.gguf"),
    })
}

/// Collects events on a channel; `closed` simulates a client that went away.
struct ChannelSink {
    tx: mpsc::Sender<Event>,
    closed: Arc<AtomicBool>,
}

impl EventSink for ChannelSink {
    fn send(&mut self, event: Event) -> bool {
        !self.closed.load(Ordering::Relaxed) && self.tx.send(event).is_ok()
    }
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

fn request(
    prompt: Vec<u32>,
    params: SamplingParams,
) -> (Request, mpsc::Receiver<Event>, Arc<AtomicBool>) {
    let (tx, rx) = mpsc::channel();
    let closed = Arc::new(AtomicBool::new(false));
    let request = Request {
        prompt,
        params,
        priority: DEFAULT_PRIORITY,
        ignore_eos: false,
        logprobs: None,
        events: Box::new(ChannelSink {
            tx,
            closed: closed.clone(),
        }),
    };
    (request, rx, closed)
}

/// Generated ids and the finish event of one request.
fn collect(rx: &mpsc::Receiver<Event>) -> (Vec<u32>, String, Event) {
    let mut ids = Vec::new();
    let mut text = String::new();
    loop {
        let event = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the engine answers");
        match event {
            Event::Token(t) => {
                ids.push(t.id);
                text.push_str(&t.text);
            }
            Event::Done(ref d) => {
                text.push_str(&d.text);
                return (ids, text, event);
            }
            Event::Failed(_) => return (ids, text, event),
        }
    }
}

fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 31 + salt * 7 + 3) % 290 + 5)
        .collect()
}

fn greedy(max_tokens: usize) -> SamplingParams {
    SamplingParams {
        max_tokens,
        ..SamplingParams::greedy()
    }
}

fn kv_bytes_for(model: &LoadedModel, blocks: usize, block_size: usize) -> usize {
    blocks * PagedKv::block_bytes(model.model.config(), block_size, KvType::F16)
}

/// Sixteen requests of different lengths at once give what each gives alone, with room for all and
/// with a pool so small that the scheduler must preempt and recompute.
#[test]
fn batched_greedy_equals_one_at_a_time() {
    batched_greedy_equals_one_at_a_time_on(tiny());
}

/// The same with sliding-window layers: prompts and generations run past the window.
#[test]
fn batched_greedy_equals_one_at_a_time_with_a_sliding_window() {
    batched_greedy_equals_one_at_a_time_on(tiny_gemma());
}

fn batched_greedy_equals_one_at_a_time_on(model: Arc<LoadedModel>) {
    let jobs: Vec<(Vec<u32>, SamplingParams)> = (0..16)
        .map(|i| {
            let params = if i % 4 == 3 {
                SamplingParams {
                    max_tokens: 12,
                    seed: i as u64,
                    ..SamplingParams::default()
                }
            } else {
                greedy(4 + i % 9)
            };
            (prompt(3 + i * 5 % 37, i as u32), params)
        })
        .collect();
    let alone: Vec<(Vec<u32>, String)> = jobs
        .iter()
        .map(|(p, params)| {
            let g = generate(&model, p, params, |_| {}).expect("generates");
            (g.tokens, g.text)
        })
        .collect();
    for (kv_blocks, step_tokens) in [(256, 512), (16, 7)] {
        let engine = Engine::start(
            model.clone(),
            ServeConfig {
                max_batch: 16,
                kv_bytes: kv_bytes_for(&model, kv_blocks, 4),
                block_size: 4,
                step_tokens,
                ..ServeConfig::default()
            },
        )
        .expect("starts");
        let receivers: Vec<_> = jobs
            .iter()
            .map(|(p, params)| {
                let (req, rx, _) = request(p.clone(), params.clone());
                engine.submit(req).expect("accepted");
                rx
            })
            .collect();
        for (i, rx) in receivers.iter().enumerate() {
            let (ids, text, done) = collect(rx);
            let Event::Done(done) = done else {
                panic!("request {i} failed: {done:?}");
            };
            assert_eq!(ids, alone[i].0, "request {i} with {kv_blocks} blocks");
            assert_eq!(text, alone[i].1, "request {i} text");
            assert_eq!(done.completion_tokens, ids.len());
            assert_eq!(done.prompt_tokens, jobs[i].0.len());
        }
        let stats = engine.stats();
        if kv_blocks == 16 {
            assert!(
                stats.preemptions.load(Ordering::Relaxed) > 0,
                "a 16-block pool must preempt"
            );
        }
        engine.shutdown();
        assert_eq!(
            stats.kv_blocks_used.load(Ordering::Relaxed),
            0,
            "every block returned"
        );
    }
}

#[test]
fn a_cached_prefix_is_reused() {
    let model = tiny();
    let engine = Engine::start(
        model.clone(),
        ServeConfig {
            block_size: 4,
            ..ServeConfig::default()
        },
    )
    .expect("starts");
    let shared = prompt(40, 9);
    let (first, rx, _) = request(shared.clone(), greedy(3));
    engine.submit(first).expect("accepted");
    let (ids_first, _, done) = collect(&rx);
    let Event::Done(done) = done else {
        panic!("{done:?}")
    };
    assert_eq!(done.cached_tokens, 0);
    let mut longer = shared.clone();
    longer.extend(prompt(5, 1));
    let (second, rx, _) = request(longer.clone(), greedy(3));
    engine.submit(second).expect("accepted");
    let (ids_second, _, done) = collect(&rx);
    let Event::Done(done) = done else {
        panic!("{done:?}")
    };
    assert_eq!(
        done.cached_tokens, 40,
        "the 40-token prefix (10 full blocks) is reused"
    );
    let alone = generate(&model, &longer, &greedy(3), |_| {}).expect("generates");
    assert_eq!(
        ids_second, alone.tokens,
        "reuse changes nothing in the output"
    );
    assert_eq!(ids_first.len(), 3);
    assert!(engine.stats().prefix_hit_rate() > 0.4);
}

/// Each step after the first of a request follows one that left it running: one gap each. The idle
/// time between two requests served one after the other is no gap.
#[test]
fn gaps_between_steps_are_summed_while_requests_run() {
    let engine = Engine::start(tiny(), ServeConfig::default()).expect("starts");
    let idle = Duration::from_millis(300);
    for salt in 0..2 {
        let (r, rx, _) = request(prompt(10, salt), greedy(6));
        engine.submit(r).expect("accepted");
        let (_, _, done) = collect(&rx);
        assert!(matches!(done, Event::Done(_)), "{done:?}");
        std::thread::sleep(idle);
    }
    let times = engine.stats().step_times();
    let gaps = times.between_steps;
    assert!(times.steps() >= 4, "{times:?}");
    assert_eq!(gaps.gaps, times.steps() - 2, "{times:?}");
    assert!(
        gaps.seconds > 0.0 && gaps.seconds < idle.as_secs_f64(),
        "{times:?}"
    );
}

#[test]
fn a_cancelled_request_frees_its_memory_and_others_go_on() {
    let model = tiny();
    let engine = Engine::start(model.clone(), ServeConfig::default()).expect("starts");
    let (gone, rx_gone, closed) = request(prompt(20, 1), greedy(100));
    let (kept, rx_kept, _) = request(prompt(10, 2), greedy(20));
    engine.submit(gone).expect("accepted");
    engine.submit(kept).expect("accepted");
    // Wait for the first token of the one that goes away, then close it.
    assert!(matches!(
        rx_gone.recv_timeout(Duration::from_secs(60)),
        Ok(Event::Token(_))
    ));
    closed.store(true, Ordering::Relaxed);
    let (ids, _, done) = collect(&rx_kept);
    assert!(matches!(done, Event::Done(_)), "{done:?}");
    assert_eq!(
        ids,
        generate(&model, &prompt(10, 2), &greedy(20), |_| {})
            .expect("gen")
            .tokens
    );
    // The cancelled one is retired within a few steps.
    for _ in 0..100 {
        if engine.stats().kv_blocks_used.load(Ordering::Relaxed) == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(engine.stats().kv_blocks_used.load(Ordering::Relaxed), 0);
    assert_eq!(engine.stats().finished.load(Ordering::Relaxed), 2);
}

#[test]
fn bad_requests_are_refused_with_a_reason() {
    let model = tiny();
    let context = model.model.config().context_length;
    let engine = Engine::start(
        model.clone(),
        ServeConfig {
            max_waiting: 0,
            ..ServeConfig::default()
        },
    )
    .expect("starts");
    let refuse = |prompt: Vec<u32>, params: SamplingParams| {
        let (req, _rx, _) = request(prompt, params);
        engine.submit(req).expect_err("refused")
    };
    let e = refuse(Vec::new(), greedy(4));
    assert!(e.to_string().contains("empty"), "{e}");
    let e = refuse(vec![100_000], greedy(4));
    assert!(e.to_string().contains("outside the vocabulary"), "{e}");
    let e = refuse(prompt(10, 1), greedy(context));
    assert!(e.to_string().contains("maximum context length"), "{e}");
    let e = refuse(
        prompt(10, 1),
        SamplingParams {
            top_p: 2.0,
            ..greedy(4)
        },
    );
    assert!(e.to_string().contains("top_p"), "{e}");
    let e = refuse(prompt(10, 1), greedy(4));
    assert_eq!(e, SubmitError::Overloaded { waiting: 0 });
    assert!(
        Engine::start(
            model,
            ServeConfig {
                kv_bytes: 10,
                ..ServeConfig::default()
            }
        )
        .is_err()
    );
}

/// Records which request each event belongs to, in the order the engine sends them; at each of its
/// first events a request given pauses tells the test and waits until the test lets it go (so that
/// later requests are surely queued while this one still decodes).
struct OrderSink {
    id: usize,
    log: Arc<std::sync::Mutex<Vec<(usize, bool)>>>,
    pauses: VecDeque<Pause>,
}

/// One pause of an [`OrderSink`]: it tells the test it reached the event, then waits for its go.
type Pause = (mpsc::Sender<()>, mpsc::Receiver<()>);

impl EventSink for OrderSink {
    fn send(&mut self, event: Event) -> bool {
        let done = !matches!(event, Event::Token(_));
        self.log.lock().expect("log").push((self.id, done));
        if let Some((seen, go)) = self.pauses.pop_front() {
            seen.send(()).expect("the test waits");
            go.recv().expect("the test lets it go");
        }
        true
    }
    fn is_closed(&self) -> bool {
        false
    }
}

/// An engine with `drain_hold` that has timed a prompt and decode steps, and a log of its events.
struct OrderedEngine {
    engine: Engine,
    log: Arc<std::sync::Mutex<Vec<(usize, bool)>>>,
}

impl OrderedEngine {
    fn start(drain_hold: f64) -> OrderedEngine {
        let config = ServeConfig {
            drain_hold,
            ..ServeConfig::default()
        };
        let engine = Engine::start(tiny(), config).expect("starts");
        let (warm, rx, _) = request(prompt(10, 9), greedy(8));
        engine.submit(warm).expect("accepted");
        collect(&rx);
        OrderedEngine {
            engine,
            log: Arc::default(),
        }
    }

    /// Submits request `id`, pausing at its first `pauses.len()` events.
    fn submit(&self, id: usize, prompt: Vec<u32>, max_tokens: usize, pauses: Vec<Pause>) {
        self.engine
            .submit(Request {
                prompt,
                params: greedy(max_tokens),
                priority: DEFAULT_PRIORITY,
                ignore_eos: true,
                logprobs: None,
                events: Box::new(OrderSink {
                    id,
                    log: self.log.clone(),
                    pauses: pauses.into(),
                }),
            })
            .expect("accepted");
    }

    /// The log once `requests` requests have ended.
    fn log_when_ended(&self, requests: usize) -> Vec<(usize, bool)> {
        let ended = |log: &[(usize, bool)]| log.iter().filter(|(_, done)| *done).count();
        for _ in 0..6000 {
            if ended(&self.log.lock().expect("log")) == requests {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let log = self.log.lock().expect("log").clone();
        assert_eq!(ended(&log), requests, "every request ends: {log:?}");
        log
    }
}

/// Where request `id`'s end stands in `log`.
fn end_of(log: &[(usize, bool)], id: usize) -> usize {
    log.iter()
        .position(|&e| e == (id, true))
        .unwrap_or_else(|| panic!("request {id} ended: {log:?}"))
}

/// A pause for [`OrderSink`] and the test's ends of it: (seen, go).
fn pause() -> (Pause, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (seen_tx, seen_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    ((seen_tx, go_rx), seen_rx, go_tx)
}

/// Where the `nth` event (from 0) of request `id` stands in `log`.
fn event_at(log: &[(usize, bool)], id: usize, nth: usize) -> usize {
    log.iter()
        .enumerate()
        .filter(|&(_, &(i, _))| i == id)
        .nth(nth)
        .map(|(at, _)| at)
        .unwrap_or_else(|| panic!("request {id} sent {nth} events at least: {log:?}"))
}

/// Whether request 1 (a prompt arriving while request 0 decodes its last 99 tokens) gave its first
/// token before request 0 ended, on an engine with `drain_hold`.
fn prompt_ran_before_the_drain(drain_hold: f64) -> bool {
    let engine = OrderedEngine::start(drain_hold);
    let (first, seen, go) = pause();
    engine.submit(0, prompt(8, 1), 100, vec![first]);
    seen.recv().expect("request 0's first token");
    engine.submit(1, prompt(24, 2), 4, Vec::new());
    go.send(()).expect("the engine waits");
    let log = engine.log_when_ended(2);
    event_at(&log, 1, 0) < end_of(&log, 0)
}

/// A prompt that arrives while a request decodes runs at once by default, stalling that request;
/// with a drain hold that its prefill's stall outweighs, it waits for the request to end.
#[test]
fn a_drain_hold_lets_a_decoding_request_finish_before_a_prompt_runs() {
    assert!(prompt_ran_before_the_drain(0.0));
    assert!(!prompt_ran_before_the_drain(1e6));
}

/// A prompt held for a drain (request 1) prefills before a prompt that came during the hold (request
/// 2), not in one step with it: request 1's first token turns only on the requests there when it was
/// held. With the hold as large as here, request 2 then waits for request 1 to drain in turn.
#[test]
fn after_a_drain_the_held_prompts_go_before_those_that_came_during_it() {
    let engine = OrderedEngine::start(1e6);
    let (first, first_seen, first_go) = pause();
    let (second, second_seen, second_go) = pause();
    engine.submit(0, prompt(8, 1), 100, vec![first, second]);
    first_seen.recv().expect("request 0's first token");
    engine.submit(1, prompt(24, 2), 4, Vec::new());
    first_go.send(()).expect("the engine waits");
    // The step that gave request 0's second token held request 1.
    second_seen.recv().expect("request 0's second token");
    engine.submit(2, prompt(20, 3), 4, Vec::new());
    second_go.send(()).expect("the engine waits");
    let log = engine.log_when_ended(3);
    assert!(end_of(&log, 0) < event_at(&log, 1, 0), "{log:?}");
    assert!(event_at(&log, 1, 1) < event_at(&log, 2, 0), "{log:?}");
}
