//! Accounting: every answered request becomes a decision row and a ledger amount. Requests only push
//! onto a bounded in-memory queue (a short lock, never an await); one writer task drains it in batches
//! to the store. While the store is down the writer keeps the rows and retries with backoff; when the
//! queue is full the oldest rows are dropped and counted, so requests are never blocked by the store.
//!
//! Ledger amounts are summed per pool within a batch and written as one row; decisions are written one
//! row each. The spend the budget policy sees is the store's total at the last refresh (all replicas)
//! plus what this replica has spent since (written or still queued), so it never under-counts.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use chrono::{DateTime, Datelike, NaiveDate, Utc};
use strata_controller::{
    planning::{self, ProfileSelector},
    store::{NewGatewayDecision, NewLedgerEntry, Store, TimeWindow},
};
use strata_planner::service::ServiceCurve;

/// Where accounting rows go and totals come from.
#[async_trait]
pub trait Sink: Send + Sync {
    /// Writes one decision.
    async fn decision(&self, row: &NewGatewayDecision) -> Result<(), String>;
    /// Writes one ledger entry.
    async fn ledger(&self, row: &NewLedgerEntry) -> Result<(), String>;
    /// Spent USD within `window`, all pools.
    async fn spent(&self, window: TimeWindow) -> Result<f64, String>;
    /// The latest plan of `workload`, as JSON.
    async fn plan(&self, workload: &str) -> Result<Option<serde_json::Value>, String>;
    /// The service model of one engine of a stored profile.
    async fn service_curve(&self, selector: &ProfileSelector) -> Result<ServiceCurve, String> {
        Err(format!(
            "{selector}: this gateway's store keeps no profiles"
        ))
    }
}

/// The store as a sink.
#[derive(Debug, Clone)]
pub struct StoreSink(pub Arc<dyn Store>);

#[async_trait]
impl Sink for StoreSink {
    async fn decision(&self, row: &NewGatewayDecision) -> Result<(), String> {
        self.0
            .insert_gateway_decision(row)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn ledger(&self, row: &NewLedgerEntry) -> Result<(), String> {
        self.0
            .insert_ledger_entry(row)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn spent(&self, window: TimeWindow) -> Result<f64, String> {
        self.0
            .ledger_total(window, None)
            .await
            .map(|t| t.amount_usd)
            .map_err(|e| e.to_string())
    }

    async fn plan(&self, workload: &str) -> Result<Option<serde_json::Value>, String> {
        let Some(w) = self
            .0
            .find_workload_by_name(workload)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        self.0
            .latest_plan_for_workload(w.id)
            .await
            .map(|p| p.map(|p| p.plan))
            .map_err(|e| e.to_string())
    }

    async fn service_curve(&self, selector: &ProfileSelector) -> Result<ServiceCurve, String> {
        planning::stored_service_curve(self.0.as_ref(), selector)
            .await
            .map_err(|e| e.to_string())
    }
}

/// A sink for traffic that is not live, such as a pilot's replay through its gateway: decisions are
/// recorded under `source` (so that the dashboard shows them apart from live traffic), and no money is
/// entered in the budget ledger or read from it (a replay spends nothing; live spend is not its budget).
pub struct SourcedSink {
    inner: Arc<dyn Sink>,
    source: String,
}

impl SourcedSink {
    /// Decisions written to `inner` under `source`.
    pub fn new(inner: Arc<dyn Sink>, source: impl Into<String>) -> Self {
        Self {
            inner,
            source: source.into(),
        }
    }
}

#[async_trait]
impl Sink for SourcedSink {
    async fn decision(&self, row: &NewGatewayDecision) -> Result<(), String> {
        let mut row = row.clone();
        row.source.clone_from(&self.source);
        self.inner.decision(&row).await
    }

    async fn ledger(&self, _: &NewLedgerEntry) -> Result<(), String> {
        Ok(())
    }

    async fn spent(&self, _: TimeWindow) -> Result<f64, String> {
        Ok(0.0)
    }

    async fn plan(&self, workload: &str) -> Result<Option<serde_json::Value>, String> {
        self.inner.plan(workload).await
    }

    async fn service_curve(&self, selector: &ProfileSelector) -> Result<ServiceCurve, String> {
        self.inner.service_curve(selector).await
    }
}

/// A store opened on first use and retried on each use until it opens, so that a gateway started while
/// the database is down still serves and catches up on its writes later.
#[derive(Debug)]
pub struct LazyStore {
    url: String,
    store: tokio::sync::OnceCell<Arc<dyn Store>>,
}

impl LazyStore {
    /// A sink for the store at `url` (opened by [`strata_controller::store::open`]).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            store: tokio::sync::OnceCell::new(),
        }
    }

    async fn get(&self) -> Result<StoreSink, String> {
        self.store
            .get_or_try_init(|| strata_controller::store::open(&self.url))
            .await
            .map(|s| StoreSink(s.clone()))
            .map_err(|e| format!("opening the store: {e}"))
    }
}

#[async_trait]
impl Sink for LazyStore {
    async fn decision(&self, row: &NewGatewayDecision) -> Result<(), String> {
        self.get().await?.decision(row).await
    }

    async fn ledger(&self, row: &NewLedgerEntry) -> Result<(), String> {
        self.get().await?.ledger(row).await
    }

    async fn spent(&self, window: TimeWindow) -> Result<f64, String> {
        self.get().await?.spent(window).await
    }

    async fn plan(&self, workload: &str) -> Result<Option<serde_json::Value>, String> {
        self.get().await?.plan(workload).await
    }

    async fn service_curve(&self, selector: &ProfileSelector) -> Result<ServiceCurve, String> {
        self.get().await?.service_curve(selector).await
    }
}

/// One request's accounting.
#[derive(Debug, Clone)]
pub struct Record {
    /// The decision row.
    pub decision: NewGatewayDecision,
}

#[derive(Debug, Default)]
struct Spend {
    day: Option<NaiveDate>,
    snapshot_day: f64,
    snapshot_month: f64,
    /// Local spend (written or queued) since the last snapshot.
    since_snapshot_day: f64,
    since_snapshot_month: f64,
    requests_today: u64,
    gpu_requests_today: u64,
}

/// The queue, the writer's counters and the spend figures.
#[derive(Debug)]
pub struct Accounting {
    queue: Mutex<VecDeque<Record>>,
    capacity: usize,
    batch: usize,
    flush: Duration,
    notify: tokio::sync::Notify,
    spend: Mutex<Spend>,
    /// Rows dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Decisions written.
    pub written: AtomicU64,
    /// True while the last write failed.
    pub store_down: AtomicBool,
    stop: AtomicBool,
}

fn month_start(d: NaiveDate) -> NaiveDate {
    d.with_day(1).unwrap_or(d)
}

impl Accounting {
    /// A queue of `capacity` rows, written `batch` at a time at least every `flush`.
    pub fn new(capacity: usize, batch: usize, flush: Duration) -> Self {
        Self {
            queue: Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            batch: batch.max(1),
            flush,
            notify: tokio::sync::Notify::new(),
            spend: Mutex::new(Spend::default()),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            store_down: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    fn spend(&self) -> std::sync::MutexGuard<'_, Spend> {
        self.spend.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn roll(s: &mut Spend, today: NaiveDate) {
        if s.day != Some(today) {
            if s.day.is_some_and(|d| month_start(d) != month_start(today)) {
                s.snapshot_month = 0.0;
                s.since_snapshot_month = 0.0;
            }
            s.day = Some(today);
            s.snapshot_day = 0.0;
            s.since_snapshot_day = 0.0;
            s.requests_today = 0;
            s.gpu_requests_today = 0;
        }
    }

    /// Counts a routed request (for the GPU share).
    pub fn count_request(&self, gpu: bool, now: DateTime<Utc>) {
        let mut s = self.spend();
        Self::roll(&mut s, now.date_naive());
        s.requests_today += 1;
        s.gpu_requests_today += u64::from(gpu);
    }

    /// Queues a request's rows; never waits. The oldest row is dropped when the queue is full.
    pub fn push(&self, record: Record) {
        {
            let mut s = self.spend();
            Self::roll(&mut s, record.decision.decided_at.date_naive());
            s.since_snapshot_day += record.decision.cost_usd;
            s.since_snapshot_month += record.decision.cost_usd;
        }
        let len = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.len() >= self.capacity {
                q.pop_front();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            q.push_back(record);
            q.len()
        };
        if len >= self.batch {
            self.notify.notify_one();
        }
    }

    /// Rows waiting to be written.
    pub fn queued(&self) -> usize {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// (spent today, spent this month, GPU share of today's requests).
    pub fn spent(&self, now: DateTime<Utc>) -> (f64, f64, f64) {
        let mut s = self.spend();
        Self::roll(&mut s, now.date_naive());
        let share = if s.requests_today == 0 {
            0.0
        } else {
            s.gpu_requests_today as f64 / s.requests_today as f64
        };
        (
            s.snapshot_day + s.since_snapshot_day,
            s.snapshot_month + s.since_snapshot_month,
            share,
        )
    }

    /// Re-reads the day's and month's totals from `sink`; on failure the figures stay as they were.
    pub async fn refresh(&self, sink: &dyn Sink, now: DateTime<Utc>) -> Result<(), String> {
        let today = now.date_naive();
        // Local spend from here on counts on top of the new snapshot; spend written while the query runs
        // may count twice, which errs on the safe side for a budget.
        let (day0, month0) = {
            let mut s = self.spend();
            Self::roll(&mut s, today);
            (s.since_snapshot_day, s.since_snapshot_month)
        };
        let day = sink.spent(TimeWindow::day(today)).await?;
        let month_from = month_start(today);
        let next_month = month_from
            .checked_add_months(chrono::Months::new(1))
            .unwrap_or(today);
        let month = sink
            .spent(TimeWindow {
                start: month_from.and_time(chrono::NaiveTime::MIN).and_utc(),
                end: next_month.and_time(chrono::NaiveTime::MIN).and_utc(),
            })
            .await?;
        // Queued rows are not in the store yet: keep them counted.
        let queued: f64 = self
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|r| r.decision.cost_usd)
            .sum();
        let mut s = self.spend();
        if s.day == Some(today) {
            s.snapshot_day = day;
            s.snapshot_month = month;
            s.since_snapshot_day = (s.since_snapshot_day - day0).max(0.0) + queued;
            s.since_snapshot_month = (s.since_snapshot_month - month0).max(0.0) + queued;
        }
        Ok(())
    }

    /// Asks the writer to stop after a last flush.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.notify.notify_one();
    }

    fn take_batch(&self) -> Vec<Record> {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let n = q.len().min(self.batch);
        q.drain(..n).collect()
    }

    fn put_back(&self, rows: Vec<Record>) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        for r in rows.into_iter().rev() {
            if q.len() >= self.capacity {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            q.push_front(r);
        }
    }

    /// Writes one batch; rows not written go back to the front of the queue.
    async fn write_batch(&self, sink: &dyn Sink, mut rows: Vec<Record>) -> Result<(), String> {
        let mut ledger: Vec<NewLedgerEntry> = Vec::new();
        for r in &rows {
            let d = &r.decision;
            match ledger.iter_mut().find(|e| e.pool == d.pool) {
                Some(e) => {
                    e.amount_usd += d.cost_usd;
                    e.tokens += d.prompt_tokens + d.output_tokens;
                    e.recorded_at = e.recorded_at.max(d.decided_at);
                }
                None => ledger.push(NewLedgerEntry {
                    recorded_at: d.decided_at,
                    pool: d.pool.clone(),
                    amount_usd: d.cost_usd,
                    tokens: d.prompt_tokens + d.output_tokens,
                    note: Some("gateway".into()),
                }),
            }
        }
        // Ledger first: a failure there re-queues every row; decisions then go one by one.
        for e in &ledger {
            if let Err(err) = sink.ledger(e).await {
                self.put_back(rows);
                return Err(err);
            }
        }
        for i in 0..rows.len() {
            if let Err(err) = sink.decision(&rows[i].decision).await {
                // The ledger already holds these amounts: re-queue the decisions without cost.
                let rest: Vec<Record> = rows
                    .drain(i..)
                    .map(|mut r| {
                        r.decision.cost_usd = 0.0;
                        r.decision.prompt_tokens = 0;
                        r.decision.output_tokens = 0;
                        r
                    })
                    .collect();
                self.put_back(rest);
                return Err(err);
            }
            self.written.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The writer: drains the queue to `sink` until stopped, retrying with backoff while the sink fails,
    /// then flushes what is left for at most `drain_for`.
    pub async fn writer(self: Arc<Self>, sink: Option<Arc<dyn Sink>>, drain_for: Duration) {
        let mut backoff = Duration::from_millis(50);
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            if !stopping && self.queued() < self.batch {
                let _ = tokio::time::timeout(self.flush, self.notify.notified()).await;
            }
            let stopping = self.stop.load(Ordering::Relaxed);
            if stopping {
                break;
            }
            let rows = self.take_batch();
            if rows.is_empty() {
                continue;
            }
            let Some(sink) = &sink else {
                self.written.fetch_add(rows.len() as u64, Ordering::Relaxed);
                continue;
            };
            match self.write_batch(sink.as_ref(), rows).await {
                Ok(()) => {
                    self.store_down.store(false, Ordering::Relaxed);
                    backoff = Duration::from_millis(50);
                }
                Err(e) => {
                    if !self.store_down.swap(true, Ordering::Relaxed) {
                        tracing::warn!(error = %e, "store unreachable: queueing accounting rows");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        let deadline = tokio::time::Instant::now() + drain_for;
        while tokio::time::Instant::now() < deadline {
            let rows = self.take_batch();
            if rows.is_empty() {
                return;
            }
            let Some(sink) = &sink else {
                self.written.fetch_add(rows.len() as u64, Ordering::Relaxed);
                continue;
            };
            if self.write_batch(sink.as_ref(), rows).await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let left = self.queued();
        if left > 0 {
            tracing::warn!(
                rows = left,
                "store still unreachable at shutdown: accounting rows lost"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_controller::store::LIVE_TRAFFIC;

    #[derive(Default)]
    struct Memory {
        ledger: Mutex<Vec<NewLedgerEntry>>,
        decisions: Mutex<Vec<NewGatewayDecision>>,
    }

    #[async_trait]
    impl Sink for Memory {
        async fn decision(&self, row: &NewGatewayDecision) -> Result<(), String> {
            self.decisions.lock().unwrap().push(row.clone());
            Ok(())
        }
        async fn ledger(&self, row: &NewLedgerEntry) -> Result<(), String> {
            self.ledger.lock().unwrap().push(row.clone());
            Ok(())
        }
        async fn spent(&self, _: TimeWindow) -> Result<f64, String> {
            Ok(self
                .ledger
                .lock()
                .unwrap()
                .iter()
                .map(|e| e.amount_usd)
                .sum())
        }
        async fn plan(&self, _: &str) -> Result<Option<serde_json::Value>, String> {
            Ok(None)
        }
    }

    fn record(pool: &str, cost: f64) -> Record {
        Record {
            decision: NewGatewayDecision {
                decided_at: Utc::now(),
                request_id: "r".into(),
                sla_class: "c".into(),
                pool: pool.into(),
                endpoint: "e".into(),
                reason: "cpu_meets_sla".into(),
                predicted_latency_ms: None,
                observed_latency_ms: None,
                prompt_tokens: 1,
                output_tokens: 2,
                cost_usd: cost,
                source: LIVE_TRAFFIC.to_owned(),
                predicted_ttft_ms: None,
                observed_ttft_ms: None,
                raw_predicted_ttft_ms: None,
                raw_predicted_latency_ms: None,
                other_pools: None,
            },
        }
    }

    #[test]
    fn a_full_queue_drops_the_oldest_and_counts_it() {
        let a = Accounting::new(2, 10, Duration::from_millis(1));
        for i in 0..3 {
            a.push(record("cpu", f64::from(i)));
        }
        assert_eq!(a.queued(), 2);
        assert_eq!(a.dropped.load(Ordering::Relaxed), 1);
        let (day, _, _) = a.spent(Utc::now());
        assert_eq!(day, 3.0, "dropped rows still count as spent");
    }

    #[tokio::test]
    async fn a_batch_writes_one_ledger_row_per_pool() {
        let a = Accounting::new(100, 100, Duration::from_millis(1));
        for pool in ["cpu", "gpu", "cpu"] {
            a.push(record(pool, 0.5));
        }
        let sink = Memory::default();
        let rows = a.take_batch();
        a.write_batch(&sink, rows).await.expect("written");
        let ledger = sink.ledger.lock().unwrap().clone();
        assert_eq!(ledger.len(), 2);
        assert_eq!((ledger[0].amount_usd, ledger[0].tokens), (1.0, 6));
        assert_eq!(sink.decisions.lock().unwrap().len(), 3);
        a.refresh(&sink, Utc::now()).await.expect("refreshed");
        assert_eq!(
            a.spent(Utc::now()).0,
            1.5,
            "the store's total, not counted twice"
        );
    }

    #[tokio::test]
    async fn a_sourced_sink_stamps_decisions_and_leaves_the_ledger_alone() {
        let a = Accounting::new(100, 100, Duration::from_millis(1));
        for pool in ["cpu", "gpu"] {
            a.push(record(pool, 0.5));
        }
        let store = Arc::new(Memory::default());
        let replay = SourcedSink::new(store.clone(), "pilot:support");
        let rows = a.take_batch();
        a.write_batch(&replay, rows).await.expect("written");
        let decisions = store.decisions.lock().unwrap().clone();
        assert_eq!(decisions.len(), 2);
        assert!(decisions.iter().all(|d| d.source == "pilot:support"));
        assert!(
            store.ledger.lock().unwrap().is_empty(),
            "a replay spends nothing"
        );
        // Live spend is not the replay's budget.
        store
            .ledger(&NewLedgerEntry {
                recorded_at: Utc::now(),
                pool: "gpu".into(),
                amount_usd: 9.0,
                tokens: 1,
                note: None,
            })
            .await
            .expect("live spend");
        let today = TimeWindow::day(Utc::now().date_naive());
        assert_eq!(replay.spent(today).await, Ok(0.0));
    }
}
