//! The continuous-batching scheduler: each step admits waiting requests (highest priority class
//! first, first come first served within a class), reuses cached prompt prefixes, runs one forward
//! pass over every running sequence (one token each for those decoding, prompt chunks for those
//! prefilling, within a token budget), samples, and streams. When the key/value pool runs out it
//! preempts the lowest-priority, youngest sequence, which later resumes by recomputation.

use std::{
    collections::BTreeMap,
    sync::{Arc, atomic::Ordering},
    time::Instant,
};

use crate::{
    generate::StopReason,
    loader::LoadedModel,
    model::{BatchSeq, PagedKv},
    sampling::{Sampler, StopMatcher},
    serve::{
        EngineStats, Event, EventSink, Finish, Priority, Request, ServeConfig, TokenLogprob,
        TokenOut, blocks::BlockManager, steps::StepTimes,
    },
    tokenizer::StreamDecoder,
};

/// Order of service: priority class, then arrival.
type SeqKey = (Priority, u64);

/// A request being served, its state surviving preemption.
struct Sequence {
    key: SeqKey,
    /// Prompt and generated tokens; the last one is not yet in the key/value pool.
    tokens: Vec<u32>,
    prompt_len: usize,
    /// Positions whose keys and values are in `blocks`.
    computed: usize,
    blocks: Vec<u32>,
    /// Tokens generated so far.
    generated: usize,
    max_tokens: usize,
    ignore_eos: bool,
    logprobs: Option<usize>,
    sampler: Sampler,
    stops: StopMatcher,
    decoder: StreamDecoder,
    events: Box<dyn EventSink>,
    /// This step's events, sent once the step's time is recorded.
    outbox: Vec<Event>,
    cached_tokens: usize,
    preemptions: usize,
    admitted_once: bool,
    /// Whether it was waiting when a drain hold began ([`Sequence::in_wave`]).
    wave: bool,
}

impl Sequence {
    /// Whether it has prompt tokens still to run beyond its last one (a prompt, or a recomputation
    /// after preemption), rather than one token to decode.
    fn prefilling(&self) -> bool {
        self.tokens.len() - self.computed > 1
    }

    /// A prompt of the wave a drain hold began with, still to prefill: once the hold ends, the
    /// wave's prompts prefill before any prompt that came during the hold, so that a held prompt's
    /// first token turns only on the requests there when it was held.
    fn in_wave(&self) -> bool {
        self.wave && self.prefilling()
    }
}

/// Whether a step runs only the requests decoding, leaving the prompts waiting, so that the batch
/// finishes first: when the prompts' wait for the drain, summed over them (`prompts_wait_s`), is at
/// most `hold` times the stall their prefill would cost the decoding requests, summed over those
/// (`decodes_stall_s`). At 1 this is the exchange that lowers the sum of the latencies (shortest
/// remaining work first); above 1 it favours finishing what runs, which leaves each request's end to
/// the requests already there, not to those still to come. Long decodes never hold a prompt, and
/// held prompts start no decodes, so a drain always ends. `hold` 0 never holds.
pub fn holds_prompts(hold: f64, prompts_wait_s: f64, decodes_stall_s: f64) -> bool {
    hold > 0.0 && prompts_wait_s <= hold * decodes_stall_s
}

/// One sequence's share of a step.
struct Slot {
    index: usize,
    take: usize,
}

/// The scheduler's state; [`super::Engine`] runs it on its own thread.
pub struct Scheduler {
    model: Arc<LoadedModel>,
    pool: PagedKv,
    blocks: BlockManager,
    config: ServeConfig,
    stats: Arc<EngineStats>,
    waiting: BTreeMap<SeqKey, Sequence>,
    running: Vec<Sequence>,
    arrivals: u64,
    /// When the last step ended, if it left requests running (the start of a gap between steps).
    step_ended: Option<Instant>,
}

impl Scheduler {
    /// A scheduler over `pool` for `model`.
    pub(crate) fn new(
        model: Arc<LoadedModel>,
        pool: PagedKv,
        config: ServeConfig,
        stats: Arc<EngineStats>,
    ) -> Self {
        let blocks = BlockManager::new(pool.n_blocks(), pool.block_size());
        stats
            .kv_blocks_total
            .store(pool.n_blocks(), Ordering::Relaxed);
        *stats.step_times_mut() = StepTimes::with_max_batch(config.max_batch);
        Self {
            model,
            pool,
            blocks,
            config,
            stats,
            waiting: BTreeMap::new(),
            running: Vec::new(),
            arrivals: 0,
            step_ended: None,
        }
    }

    /// Whether nothing waits or runs.
    pub(crate) fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Queues a request (already checked by [`super::Engine::submit`]).
    pub(crate) fn add(&mut self, request: Request) {
        let mut events = request.events;
        let sampler = match Sampler::new(&request.params) {
            Ok(sampler) => sampler,
            Err(e) => {
                self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
                events.send(Event::Failed(e.to_string()));
                return;
            }
        };
        self.arrivals += 1;
        let key = (request.priority, self.arrivals);
        let sequence = Sequence {
            key,
            prompt_len: request.prompt.len(),
            tokens: request.prompt,
            computed: 0,
            blocks: Vec::new(),
            generated: 0,
            max_tokens: request.params.max_tokens,
            ignore_eos: request.ignore_eos,
            logprobs: request.logprobs,
            stops: StopMatcher::new(request.params.stop.iter()),
            sampler,
            decoder: StreamDecoder::default(),
            events,
            outbox: Vec::new(),
            cached_tokens: 0,
            preemptions: 0,
            admitted_once: false,
            wave: false,
        };
        self.waiting.insert(key, sequence);
    }

    /// Fails every waiting and running request with `reason`.
    pub(crate) fn fail_all(&mut self, reason: &str) {
        for (_, mut seq) in std::mem::take(&mut self.waiting) {
            seq.events.send(Event::Failed(reason.into()));
        }
        self.fail_running(reason);
        self.publish();
    }

    /// Fails the running requests with `reason` and gives back their blocks.
    pub(crate) fn fail_running(&mut self, reason: &str) {
        for mut seq in std::mem::take(&mut self.running) {
            self.blocks.release(&seq.blocks);
            seq.events.send(Event::Failed(reason.into()));
            self.stats.finished.fetch_add(1, Ordering::Relaxed);
        }
        self.publish();
    }

    /// One iteration: drop cancelled requests, admit, run one batched forward pass, sample, stream.
    pub fn step(&mut self) {
        self.drop_cancelled();
        self.admit();
        if self.running.is_empty() {
            self.step_ended = None;
            self.publish();
            return;
        }
        let started = Instant::now();
        let gap = self.step_ended.take().map(|ended| started - ended);
        let slots = self.plan_step();
        let (decoding, prompt_tokens) = self.step_shape(&slots);
        if let Some(done) = self.run(&slots) {
            // Recorded before the step's events go out, so a client holding its answer also finds
            // the step that made it in the timings.
            let ended = Instant::now();
            let seconds = (ended - started).as_secs_f64();
            {
                let mut times = self.stats.step_times_mut();
                times.record(decoding, prompt_tokens, seconds);
                if let Some(gap) = gap {
                    times.record_gap(gap.as_secs_f64());
                }
            }
            tracing::trace!(
                decoding,
                prompt_tokens,
                prompts = slots.len() - decoding,
                seconds,
                gap_s = gap.map_or(0.0, |g| g.as_secs_f64()),
                "step"
            );
            self.deliver(done);
            // The gap to the next step starts here, its events' delivery included.
            self.step_ended = (!self.running.is_empty()).then_some(ended);
        }
        self.publish();
    }

    /// What a step of `slots` runs: requests decoding their next token, and prompt tokens (prefill
    /// chunks, and recomputation after a preemption).
    fn step_shape(&self, slots: &[Slot]) -> (usize, usize) {
        let mut decoding = 0;
        let mut prompt_tokens = 0;
        for slot in slots {
            let seq = &self.running[slot.index];
            if slot.take == 1 && seq.computed >= seq.prompt_len {
                decoding += 1;
            } else {
                prompt_tokens += slot.take;
            }
        }
        (decoding, prompt_tokens)
    }

    fn drop_cancelled(&mut self) {
        let cancelled: Vec<SeqKey> = self
            .waiting
            .iter()
            .filter(|(_, s)| s.events.is_closed())
            .map(|(k, _)| *k)
            .collect();
        for key in cancelled {
            self.waiting.remove(&key);
            self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
            self.stats.finished.fetch_add(1, Ordering::Relaxed);
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].events.is_closed() {
                let seq = self.running.swap_remove(i);
                self.retire(seq);
            } else {
                i += 1;
            }
        }
    }

    /// Moves waiting requests into the batch while there is a slot and key/value room for their
    /// prompt beyond what the prefix cache already holds.
    fn admit(&mut self) {
        while self.running.len() < self.config.max_batch {
            // Blocks kept back so that each running sequence can keep decoding.
            let reserve = self.running.len();
            let Some(mut entry) = self.waiting.first_entry() else {
                return;
            };
            let seq = entry.get_mut();
            let bs = self.blocks.block_size();
            // At least the last token is computed, so that it yields logits.
            let reusable = (seq.tokens.len() - 1) / bs;
            let cached = self.blocks.acquire_prefix(&seq.tokens, reusable);
            let needed = self.blocks.blocks_for(seq.tokens.len() + 1) - cached.len();
            if needed > self.blocks.available().saturating_sub(reserve) {
                self.blocks.release(&cached);
                return;
            }
            let mut seq = entry.remove();
            self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
            seq.blocks = cached;
            seq.computed = seq.blocks.len() * bs;
            if !seq.admitted_once {
                seq.admitted_once = true;
                seq.cached_tokens = seq.computed;
                self.stats
                    .prefix_lookup_tokens
                    .fetch_add(seq.prompt_len as u64, Ordering::Relaxed);
                self.stats
                    .prefix_hit_tokens
                    .fetch_add(seq.computed as u64, Ordering::Relaxed);
            }
            self.running.push(seq);
        }
    }

    /// Chooses each running sequence's tokens for this step and makes room for them, preempting when
    /// the pool runs out. Decoding sequences come first, then prefill chunks under the token budget,
    /// unless the prompts wait for the decodes to drain ([`holds_prompts`]); after a drain, the
    /// prompts held first ([`Sequence::in_wave`]) go before those that came during it.
    fn plan_step(&mut self) -> Vec<Slot> {
        'retry: loop {
            self.running.sort_by_key(|s| (s.prefilling(), s.key));
            let prompts_wait = self.prompts_wait();
            let wave = self.running.iter().any(Sequence::in_wave);
            if prompts_wait && !wave {
                for seq in self.running.iter_mut().filter(|s| s.prefilling()) {
                    seq.wave = true;
                }
            }
            let mut budget = self.config.step_tokens;
            let mut slots = Vec::with_capacity(self.running.len());
            for index in 0..self.running.len() {
                let seq = &self.running[index];
                if prompts_wait && seq.prefilling() {
                    break;
                }
                if wave && seq.prefilling() && !seq.wave {
                    continue;
                }
                let take = (seq.tokens.len() - seq.computed).min(budget);
                if take == 0 {
                    continue;
                }
                if !self.grow(index, take) {
                    let Some(victim) = self.victim() else {
                        return slots;
                    };
                    self.preempt(victim);
                    continue 'retry;
                }
                budget -= take;
                slots.push(Slot { index, take });
            }
            return slots;
        }
    }

    /// Whether this step's prompts wait for the running decodes to drain, as [`holds_prompts`] rules
    /// on the engine's step timings so far (never before it has timed a decode step and a prompt).
    fn prompts_wait(&self) -> bool {
        if self.config.drain_hold <= 0.0 {
            return false;
        }
        let (mut decoding, mut longest_left, mut prompts, mut prompt_tokens) = (0, 0, 0, 0);
        for seq in &self.running {
            if seq.prefilling() {
                prompts += 1;
                prompt_tokens += seq.tokens.len() - seq.computed;
            } else {
                decoding += 1;
                longest_left = longest_left.max(seq.max_tokens.saturating_sub(seq.generated));
            }
        }
        if decoding == 0 || prompts == 0 {
            return false;
        }
        let times = self.stats.step_times_mut();
        let (Some(step_s), Some(token_s)) = (times.decode_step_s(decoding), times.prompt_token_s())
        else {
            return false;
        };
        // What the next step would run of the prompts.
        let prompt_tokens = prompt_tokens.min(self.config.step_tokens.saturating_sub(decoding));
        holds_prompts(
            self.config.drain_hold,
            (longest_left * prompts) as f64 * step_s,
            (prompt_tokens * decoding) as f64 * token_s,
        )
    }

    /// Gives sequence `index` blocks for `take` more positions; `false` when the pool is full.
    fn grow(&mut self, index: usize, take: usize) -> bool {
        let seq = &self.running[index];
        let want = self.blocks.blocks_for(seq.computed + take);
        while self.running[index].blocks.len() < want {
            match self.blocks.allocate() {
                Some(block) => self.running[index].blocks.push(block),
                None => return false,
            }
        }
        true
    }

    /// The running sequence to preempt: the lowest priority class, and in it the youngest.
    fn victim(&self) -> Option<usize> {
        (0..self.running.len()).max_by_key(|&i| self.running[i].key)
    }

    /// Frees a running sequence's blocks (recording its computed blocks in the prefix cache, so the
    /// recomputation may find them) and puts it back at the front of its class.
    fn preempt(&mut self, index: usize) {
        let mut seq = self.running.swap_remove(index);
        self.cache_computed(&seq);
        self.blocks.release(&seq.blocks);
        seq.blocks.clear();
        seq.computed = 0;
        seq.wave = false;
        seq.preemptions += 1;
        self.stats.preemptions.fetch_add(1, Ordering::Relaxed);
        self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            priority = seq.key.0,
            tokens = seq.tokens.len(),
            "preempted a sequence for lack of key/value memory"
        );
        self.waiting.insert(seq.key, seq);
    }

    fn cache_computed(&mut self, seq: &Sequence) {
        self.blocks.insert(&seq.tokens[..seq.computed], &seq.blocks);
    }

    /// Runs the forward pass for `slots`, then samples for each sequence that reached its last
    /// token, holding the events in its outbox; the indexes of the sequences now done, or `None`
    /// when the forward pass failed.
    fn run(&mut self, slots: &[Slot]) -> Option<Vec<usize>> {
        let batch: Vec<BatchSeq<'_>> = slots
            .iter()
            .map(|slot| {
                let seq = &self.running[slot.index];
                BatchSeq {
                    tokens: &seq.tokens[seq.computed..seq.computed + slot.take],
                    start: seq.computed,
                    blocks: &seq.blocks,
                    logits: seq.computed + slot.take == seq.tokens.len(),
                }
            })
            .collect();
        let result = self.model.model.forward_batch(&batch, &mut self.pool);
        drop(batch);
        self.stats.steps.fetch_add(1, Ordering::Relaxed);
        let logits = match result {
            Ok(logits) => logits,
            Err(e) => {
                tracing::error!(error = %e, "a batched forward pass failed");
                self.fail_running(&format!("the engine failed: {e}"));
                return None;
            }
        };
        let mut done = Vec::new();
        for (slot, logits) in slots.iter().zip(logits) {
            let seq = &mut self.running[slot.index];
            let was_prefilling = seq.computed < seq.prompt_len;
            seq.computed += slot.take;
            if seq.computed <= seq.prompt_len {
                self.stats
                    .prompt_tokens
                    .fetch_add(slot.take as u64, Ordering::Relaxed);
            }
            if was_prefilling && seq.computed >= seq.prompt_len {
                let seq = &self.running[slot.index];
                self.blocks.insert(&seq.tokens[..seq.computed], &seq.blocks);
            }
            if let Some(logits) = logits
                && self.advance(slot.index, &logits)
            {
                done.push(slot.index);
            }
        }
        Some(done)
    }

    /// Sends the running sequences' held events, then retires the sequences `done`.
    fn deliver(&mut self, mut done: Vec<usize>) {
        for seq in &mut self.running {
            for event in seq.outbox.drain(..) {
                seq.events.send(event);
            }
        }
        done.sort_unstable_by(|a, b| b.cmp(a));
        for index in done {
            let seq = self.running.swap_remove(index);
            self.retire(seq);
        }
    }

    /// Samples the next token of sequence `index` into its outbox; `true` when the sequence is done.
    fn advance(&mut self, index: usize, logits: &[f32]) -> bool {
        let tokenizer = &self.model.tokenizer;
        let context = self.model.model.config().context_length;
        let seq = &mut self.running[index];
        let token = seq.sampler.sample(logits, &seq.tokens);
        seq.tokens.push(token);
        seq.generated += 1;
        self.stats.generated_tokens.fetch_add(1, Ordering::Relaxed);
        let logprob = seq.logprobs.map(|top| token_logprob(logits, token, top));
        let finish = |seq: &Sequence, reason: StopReason, text: String| {
            Event::Done(Finish {
                text,
                reason,
                prompt_tokens: seq.prompt_len,
                completion_tokens: seq.generated,
                cached_tokens: seq.cached_tokens,
                preemptions: seq.preemptions,
            })
        };
        if !seq.ignore_eos && tokenizer.is_end_of_generation(token) {
            let tail = flush(seq);
            let event = finish(seq, StopReason::EndOfGeneration, tail);
            seq.outbox.push(Event::Token(TokenOut {
                id: token,
                text: String::new(),
                logprob,
            }));
            seq.outbox.push(event);
            return true;
        }
        let outcome = seq.stops.push(&seq.decoder.push(tokenizer, token));
        seq.outbox.push(Event::Token(TokenOut {
            id: token,
            text: outcome.text,
            logprob,
        }));
        let reason = if outcome.stopped {
            Some(StopReason::StopString)
        } else if seq.generated >= seq.max_tokens {
            Some(StopReason::MaxTokens)
        } else if seq.tokens.len() >= context {
            Some(StopReason::ContextFull)
        } else {
            None
        };
        match reason {
            Some(reason) => {
                let tail = if reason == StopReason::StopString {
                    String::new()
                } else {
                    flush(seq)
                };
                let event = finish(seq, reason, tail);
                seq.outbox.push(event);
                true
            }
            None => seq.events.is_closed(),
        }
    }

    /// Records a finished (or cancelled) sequence's blocks in the prefix cache and frees them.
    fn retire(&mut self, seq: Sequence) {
        self.cache_computed(&seq);
        self.blocks.release(&seq.blocks);
        self.stats.finished.fetch_add(1, Ordering::Relaxed);
    }

    fn publish(&self) {
        let s = &self.stats;
        s.running.store(self.running.len(), Ordering::Relaxed);
        s.kv_blocks_used
            .store(self.blocks.used(), Ordering::Relaxed);
        s.kv_blocks_cached
            .store(self.blocks.cached_unused(), Ordering::Relaxed);
    }
}

/// Text held back by the decoder and the stop matcher, released at the end.
fn flush(seq: &mut Sequence) -> String {
    let mut tail = seq.stops.push(&seq.decoder.finish()).text;
    tail.push_str(&seq.stops.finish());
    tail
}

/// The log-probability of `token` under `logits` and the `top` most likely tokens.
fn token_logprob(logits: &[f32], token: u32, top: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let log_norm = max as f64 + sum.ln();
    let logprob = |id: u32| (logits[id as usize] as f64 - log_norm) as f32;
    let mut best: Vec<u32> = Vec::with_capacity(top + 1);
    if top > 0 {
        for id in 0..logits.len() as u32 {
            let l = logits[id as usize];
            if best.len() == top && best.last().is_some_and(|&last| l <= logits[last as usize]) {
                continue;
            }
            let at = best.partition_point(|&b| logits[b as usize] >= l);
            best.insert(at, id);
            best.truncate(top);
        }
    }
    TokenLogprob {
        logprob: logprob(token),
        top: best.into_iter().map(|id| (id, logprob(id))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prompts wait only while their summed wait is within `hold` times the stall they would
    /// cost, and never at hold 0.
    #[test]
    fn prompts_wait_only_for_a_short_drain() {
        assert!(holds_prompts(2.0, 0.6, 0.3));
        assert!(!holds_prompts(2.0, 0.61, 0.3));
        assert!(holds_prompts(1.0, 0.0, 0.3));
        assert!(!holds_prompts(0.0, 0.0, 0.3));
    }

    #[test]
    fn logprobs_are_normalized_and_sorted() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let lp = token_logprob(&logits, 2, 3);
        let total: f64 = logits
            .iter()
            .map(|&l| {
                let max = 3.0f64;
                (l as f64 - max).exp()
            })
            .sum();
        let want = (2.0 - 3.0 - total.ln()) as f32;
        assert!((lp.logprob - want).abs() < 1e-6, "{} vs {want}", lp.logprob);
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 2], "ties keep id order, then the next best");
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert!(token_logprob(&logits, 0, 0).top.is_empty());
    }
}
