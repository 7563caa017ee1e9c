//! The workload: request classes (share, length distributions, p99 SLAs, priority), arrivals as a 24-hour
//! rate profile or a CSV trace, the budget with its policy actions, and the GPU fallback. Parsed from
//! TOML (+ CSV) into validated types.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, PriceModel};
use crate::dist::standard_normal;
use crate::error::{PlannerError, Result, invalid, non_negative, positive};
use crate::tco::{CostInputs, SiteCosts};

/// Hours in a planned day.
pub const HOURS: usize = 24;
/// Days in a billing month (730 h / 24).
pub const DAYS_PER_MONTH: f64 = 730.0 / 24.0;
const MAX_TOKENS: f64 = 1_000_000.0;
/// Traces longer than a year are refused.
const MAX_TRACE_SECONDS: f64 = 366.0 * 86_400.0;

/// A token-length distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum LengthDist {
    /// Always `tokens`.
    Fixed {
        /// Token count.
        tokens: f64,
    },
    /// Uniform integers in `[min, max]`.
    Uniform {
        /// Smallest length.
        min: f64,
        /// Largest length.
        max: f64,
    },
    /// Log-normal with the given mean and log-space sigma, capped at `max`.
    LogNormal {
        /// Mean length (before the cap).
        mean: f64,
        /// Standard deviation of ln(length).
        sigma: f64,
        /// Cap.
        max: f64,
    },
}

impl LengthDist {
    /// Mean length (the log-normal's mean ignores the cap, an over-estimate of at most a few percent
    /// for sensible caps).
    pub fn mean(&self) -> f64 {
        match *self {
            LengthDist::Fixed { tokens } => tokens,
            LengthDist::Uniform { min, max } => (min + max) / 2.0,
            LengthDist::LogNormal { mean, max, .. } => mean.min(max),
        }
    }

    /// 99th percentile length.
    pub fn p99(&self) -> f64 {
        match *self {
            LengthDist::Fixed { tokens } => tokens,
            LengthDist::Uniform { min, max } => min + 0.99 * (max - min),
            LengthDist::LogNormal { mean, sigma, max } => {
                let mu = mean.ln() - sigma * sigma / 2.0;
                (mu + 2.326_347_874 * sigma).exp().min(max)
            }
        }
    }

    /// One draw, rounded to whole tokens and at least 1.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> u32 {
        let x = match *self {
            LengthDist::Fixed { tokens } => tokens,
            LengthDist::Uniform { min, max } => min + rng.random::<f64>() * (max - min + 1.0),
            LengthDist::LogNormal { mean, sigma, max } => {
                let mu = mean.ln() - sigma * sigma / 2.0;
                (mu + sigma * standard_normal(rng)).exp().min(max)
            }
        };
        x.floor().clamp(1.0, MAX_TOKENS) as u32
    }

    fn validate(&self, class: &str, key: &'static str) -> Result<()> {
        let bad = |p: &str| Err(invalid("workload", class, key, p.to_string()));
        match *self {
            LengthDist::Fixed { tokens } => positive("workload", class, key, tokens),
            LengthDist::Uniform { min, max }
                if !(min >= 1.0 && max >= min && max <= MAX_TOKENS) =>
            {
                bad("uniform needs 1 <= min <= max <= 1000000")
            }
            LengthDist::LogNormal { mean, sigma, max }
                if !(mean >= 1.0
                    && (0.0..=3.0).contains(&sigma)
                    && (1.0..=MAX_TOKENS).contains(&max)) =>
            {
                bad("log_normal needs mean >= 1, 0 <= sigma <= 3, 1 <= max <= 1000000")
            }
            _ => Ok(()),
        }
    }
}

/// A class's latency objectives (p99, seconds); at least one is set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Sla {
    /// p99 time to first token bound.
    #[serde(default)]
    pub ttft_p99_s: Option<f64>,
    /// p99 end-to-end bound.
    #[serde(default)]
    pub e2e_p99_s: Option<f64>,
}

impl Sla {
    /// True when `ttft`/`e2e` meet every set bound.
    pub fn met_by(&self, ttft: f64, e2e: f64) -> bool {
        self.ttft_p99_s.is_none_or(|s| ttft <= s) && self.e2e_p99_s.is_none_or(|s| e2e <= s)
    }

    /// The bounds multiplied by `factor` (used when a budget action relaxes a class).
    pub fn relaxed(&self, factor: f64) -> Sla {
        Sla {
            ttft_p99_s: self.ttft_p99_s.map(|s| s * factor),
            e2e_p99_s: self.e2e_p99_s.map(|s| s * factor),
        }
    }
}

/// A class of requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestClass {
    /// Class name, e.g. "chat".
    pub name: String,
    /// Fraction of arrivals (hourly profiles; shares sum to 1). Ignored with a trace.
    #[serde(default)]
    pub share: f64,
    /// Higher is more important; the lowest priority degrades first.
    #[serde(default)]
    pub priority: u32,
    /// Prompt length distribution.
    pub prompt_tokens: LengthDist,
    /// Output length distribution.
    pub output_tokens: LengthDist,
    /// p99 objectives.
    pub sla: Sla,
}

/// One trace record.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Arrival time, seconds from the trace start.
    pub t_s: f64,
    /// Index into the workload's classes.
    pub class: usize,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
}

/// How requests arrive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Poisson arrivals with a constant rate within each hour of the day (requests/s, 24 values).
    Hourly(Vec<f64>),
    /// A recorded trace, sorted by time; its hours fold onto one day for planning.
    Trace(Vec<TraceRecord>),
}

/// What happens when the day's spend passes a threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum BudgetAction {
    /// Multiply a class's SLA by `factor` (>= 1).
    RelaxSla {
        /// Spent fraction of the day's budget at which the action starts.
        at_spent_fraction: f64,
        /// Class name.
        class: String,
        /// SLA multiplier.
        factor: f64,
    },
    /// Send no more than `max_share` of requests to the GPU fallback.
    CapGpuShare {
        /// Spent fraction of the day's budget at which the action starts.
        at_spent_fraction: f64,
        /// Largest GPU share of requests, 0..=1.
        max_share: f64,
    },
    /// Reject requests of classes with priority below `priority`.
    RejectBelowPriority {
        /// Spent fraction of the day's budget at which the action starts.
        at_spent_fraction: f64,
        /// Classes below this priority are rejected.
        priority: u32,
    },
}

impl BudgetAction {
    /// The spent fraction at which the action starts.
    pub fn threshold(&self) -> f64 {
        match *self {
            BudgetAction::RelaxSla {
                at_spent_fraction, ..
            }
            | BudgetAction::CapGpuShare {
                at_spent_fraction, ..
            }
            | BudgetAction::RejectBelowPriority {
                at_spent_fraction, ..
            } => at_spent_fraction,
        }
    }
}

/// Spending limit and the actions taken as it is approached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Budget {
    /// $ per day; `None` = unlimited.
    pub per_day: Option<f64>,
    /// Actions, each with its spent-fraction threshold.
    pub policy: Vec<BudgetAction>,
}

/// The GPU fallback as written in a workload file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GpuFallbackSpec {
    /// A pool of catalog GPU instances billed per hour.
    Instance {
        /// Catalog instance type.
        instance: String,
        /// Region, when the name alone is ambiguous.
        #[serde(default)]
        region: Option<String>,
        /// Output tokens/s one instance sustains within the SLAs.
        output_tokens_per_s: f64,
        /// p99 TTFT of the fallback, seconds.
        ttft_p99_s: f64,
        /// p99 TPOT of the fallback, seconds.
        tpot_p99_s: f64,
        /// Where the throughput and latency figures come from.
        basis: String,
    },
    /// A catalog endpoint billed per token, with unbounded capacity.
    PerToken {
        /// Catalog endpoint name.
        endpoint: String,
        /// p99 TTFT, seconds.
        ttft_p99_s: f64,
        /// p99 TPOT, seconds.
        tpot_p99_s: f64,
        /// Where the latency figures come from.
        basis: String,
    },
}

/// How the resolved GPU fallback is paid for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GpuPricing {
    /// Whole instances per hour, each carrying `output_tokens_per_s`.
    PerInstanceHour {
        /// $/hour of one instance (TCO, not just rent).
        hourly_cost: f64,
        /// Output tokens/s per instance.
        output_tokens_per_s: f64,
    },
    /// Per token.
    PerToken {
        /// $ per 1M prompt tokens.
        input_per_million: f64,
        /// $ per 1M output tokens.
        output_per_million: f64,
    },
}

/// The GPU fallback with its price looked up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuFallback {
    /// Instance type or endpoint name.
    pub name: String,
    /// Pricing.
    pub pricing: GpuPricing,
    /// p99 TTFT, seconds.
    pub ttft_p99_s: f64,
    /// p99 TPOT, seconds.
    pub tpot_p99_s: f64,
}

impl GpuFallback {
    /// Looks up the price of `spec` in `catalog` under `model` and `site`.
    ///
    /// # Errors
    /// [`PlannerError::NotFound`] for unknown names or a missing price for `model`.
    pub fn resolve(
        spec: &GpuFallbackSpec,
        catalog: &Catalog,
        model: PriceModel,
        site: &SiteCosts,
    ) -> Result<Self> {
        match spec {
            GpuFallbackSpec::Instance {
                instance,
                region,
                output_tokens_per_s,
                ttft_p99_s,
                tpot_p99_s,
                ..
            } => {
                let found = match region {
                    Some(r) => catalog.find_in(instance, r),
                    None => catalog.find(instance),
                };
                let not_found = || PlannerError::NotFound {
                    what: "instance type",
                    name: instance.clone(),
                };
                let inst = found.ok_or_else(not_found)?;
                let cost = CostInputs::for_instance(inst, model, site).ok_or_else(|| {
                    PlannerError::NotFound {
                        what: "price",
                        name: format!("{instance} {model}"),
                    }
                })?;
                Ok(GpuFallback {
                    name: instance.clone(),
                    pricing: GpuPricing::PerInstanceHour {
                        hourly_cost: cost.hourly_cost(),
                        output_tokens_per_s: *output_tokens_per_s,
                    },
                    ttft_p99_s: *ttft_p99_s,
                    tpot_p99_s: *tpot_p99_s,
                })
            }
            GpuFallbackSpec::PerToken {
                endpoint,
                ttft_p99_s,
                tpot_p99_s,
                ..
            } => {
                let e = catalog
                    .find_endpoint(endpoint)
                    .ok_or_else(|| PlannerError::NotFound {
                        what: "endpoint",
                        name: endpoint.clone(),
                    })?;
                Ok(GpuFallback {
                    name: endpoint.clone(),
                    pricing: GpuPricing::PerToken {
                        input_per_million: e.input_per_million,
                        output_per_million: e.output_per_million,
                    },
                    ttft_p99_s: *ttft_p99_s,
                    tpot_p99_s: *tpot_p99_s,
                })
            }
        }
    }

    /// Marginal $ of one request (per-instance pricing counts the instance-seconds its output takes).
    pub fn request_cost(&self, prompt_tokens: f64, output_tokens: f64) -> f64 {
        match self.pricing {
            GpuPricing::PerInstanceHour {
                hourly_cost,
                output_tokens_per_s,
            } => output_tokens / output_tokens_per_s / 3600.0 * hourly_cost,
            GpuPricing::PerToken {
                input_per_million,
                output_per_million,
            } => (prompt_tokens * input_per_million + output_tokens * output_per_million) / 1e6,
        }
    }

    /// $ for one hour carrying `output_tokens` and `prompt_tokens`: whole instances for hourly pricing
    /// (at least one when anything is sent), per token otherwise.
    pub fn hour_cost(&self, prompt_tokens: f64, output_tokens: f64) -> f64 {
        match self.pricing {
            GpuPricing::PerInstanceHour {
                hourly_cost,
                output_tokens_per_s,
            } => {
                if output_tokens <= 0.0 {
                    0.0
                } else {
                    (output_tokens / (output_tokens_per_s * 3600.0) - 1e-9)
                        .ceil()
                        .max(1.0)
                        * hourly_cost
                }
            }
            GpuPricing::PerToken { .. } => self.request_cost(prompt_tokens, output_tokens),
        }
    }

    /// The same fallback with its prices multiplied by `k`.
    pub fn with_price_factor(&self, k: f64) -> GpuFallback {
        let mut g = self.clone();
        match &mut g.pricing {
            GpuPricing::PerInstanceHour { hourly_cost, .. } => *hourly_cost *= k,
            GpuPricing::PerToken {
                input_per_million,
                output_per_million,
            } => {
                *input_per_million *= k;
                *output_per_million *= k;
            }
        }
        g
    }
}

/// A validated workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Name.
    pub name: String,
    /// Request classes.
    pub classes: Vec<RequestClass>,
    /// Arrivals.
    pub arrivals: Arrivals,
    /// Budget.
    pub budget: Budget,
    /// GPU fallback, when the file names one.
    pub gpu_fallback: Option<GpuFallbackSpec>,
}

/// A workload file as written (TOML); [`WorkloadFile::into_workload`] validates it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    /// Name.
    pub name: String,
    /// `[[class]]` tables.
    pub class: Vec<RequestClass>,
    /// `[arrivals]`: `hourly_rps = [24 values]` or `trace_file = "path.csv"`.
    pub arrivals: ArrivalsFile,
    /// `[budget]`: `per_day` or `per_month`, and `[[budget.policy]]` actions.
    #[serde(default)]
    pub budget: BudgetFile,
    /// `[gpu_fallback]`.
    #[serde(default)]
    pub gpu_fallback: Option<GpuFallbackSpec>,
    /// `[pilot]`: what `strata pilot` tries and how strict its gates are (the planner ignores it).
    #[serde(default)]
    pub pilot: Option<crate::pilot::settings::PilotSpec>,
}

/// `[arrivals]` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ArrivalsFile {
    /// 24 hourly rates, requests/s.
    #[serde(default)]
    pub hourly_rps: Option<Vec<f64>>,
    /// A CSV trace the caller reads and passes in.
    #[serde(default)]
    pub trace_file: Option<String>,
}

/// `[budget]` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct BudgetFile {
    /// $ per day.
    #[serde(default)]
    pub per_day: Option<f64>,
    /// $ per month (converted with 730/24 days per month).
    #[serde(default)]
    pub per_month: Option<f64>,
    /// Actions.
    #[serde(default)]
    pub policy: Vec<BudgetAction>,
}

impl WorkloadFile {
    /// Parses the TOML text.
    ///
    /// # Errors
    /// [`PlannerError::Toml`] naming line and key.
    pub fn from_toml_str(s: &str) -> Result<Self> {
        toml::from_str(s).map_err(|e| PlannerError::Toml {
            what: "workload",
            message: e.to_string(),
        })
    }

    /// The trace file the workload refers to, which the caller must read and pass to `into_workload`.
    pub fn trace_file(&self) -> Option<&str> {
        self.arrivals.trace_file.as_deref()
    }

    /// Validates into a [`Workload`]; `trace_csv` is the text of `trace_file` when there is one.
    ///
    /// # Errors
    /// [`PlannerError::InvalidField`] naming class and key, [`PlannerError::Csv`] naming the trace line.
    pub fn into_workload(self, trace_csv: Option<&str>) -> Result<Workload> {
        const W: &str = "workload";
        if self.class.is_empty() {
            return Err(invalid(
                W,
                &self.name,
                "class",
                "needs at least one [[class]]".into(),
            ));
        }
        for c in &self.class {
            c.prompt_tokens.validate(&c.name, "prompt_tokens")?;
            c.output_tokens.validate(&c.name, "output_tokens")?;
            if c.sla.ttft_p99_s.is_none() && c.sla.e2e_p99_s.is_none() {
                return Err(invalid(
                    W,
                    &c.name,
                    "sla",
                    "needs ttft_p99_s and/or e2e_p99_s".into(),
                ));
            }
            if let Some(s) = c.sla.ttft_p99_s {
                positive(W, &c.name, "sla.ttft_p99_s", s)?;
            }
            if let Some(s) = c.sla.e2e_p99_s {
                positive(W, &c.name, "sla.e2e_p99_s", s)?;
            }
        }
        let names: Vec<&str> = self.class.iter().map(|c| c.name.as_str()).collect();
        let arrivals = match (
            self.arrivals.hourly_rps,
            self.arrivals.trace_file,
            trace_csv,
        ) {
            (Some(rps), None, _) => {
                check_hourly(&self.name, &rps)?;
                check_shares(&self.class)?;
                Arrivals::Hourly(rps)
            }
            (None, Some(_), Some(csv)) => Arrivals::Trace(parse_trace_csv(csv, &names)?),
            (None, Some(f), None) => {
                return Err(invalid(
                    W,
                    &self.name,
                    "arrivals.trace_file",
                    format!("`{f}` was not read"),
                ));
            }
            _ => {
                let msg = "needs exactly one of hourly_rps or trace_file".to_string();
                return Err(invalid(W, &self.name, "arrivals", msg));
            }
        };
        let per_day = match (self.budget.per_day, self.budget.per_month) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    W,
                    &self.name,
                    "budget",
                    "give per_day or per_month, not both".into(),
                ));
            }
            (Some(d), None) => Some(d),
            (None, Some(m)) => Some(m / DAYS_PER_MONTH),
            (None, None) => None,
        };
        if let Some(d) = per_day {
            non_negative(W, &self.name, "budget", d)?;
        }
        for a in &self.budget.policy {
            check_action(a, &names)?;
        }
        if let Some(g) = &self.gpu_fallback {
            check_fallback(g)?;
        }
        Ok(Workload {
            name: self.name,
            classes: self.class,
            arrivals,
            budget: Budget {
                per_day,
                policy: self.budget.policy,
            },
            gpu_fallback: self.gpu_fallback,
        })
    }
}

fn check_hourly(name: &str, rps: &[f64]) -> Result<()> {
    if rps.len() != HOURS {
        let msg = format!("needs {HOURS} values, got {}", rps.len());
        return Err(invalid("workload", name, "arrivals.hourly_rps", msg));
    }
    rps.iter()
        .try_for_each(|&r| non_negative("workload", name, "arrivals.hourly_rps", r))
}

fn check_shares(classes: &[RequestClass]) -> Result<()> {
    for c in classes {
        non_negative("workload", &c.name, "share", c.share)?;
    }
    let sum: f64 = classes.iter().map(|c| c.share).sum();
    if (sum - 1.0).abs() > 1e-6 {
        let msg = format!("class shares must sum to 1, they sum to {sum}");
        return Err(invalid("workload", &classes[0].name, "share", msg));
    }
    Ok(())
}

fn check_action(a: &BudgetAction, names: &[&str]) -> Result<()> {
    let t = a.threshold();
    if !(0.0..=10.0).contains(&t) {
        return Err(invalid(
            "workload",
            "budget.policy",
            "at_spent_fraction",
            format!("out of range: {t}"),
        ));
    }
    match a {
        BudgetAction::RelaxSla { class, factor, .. } => {
            if !names.contains(&class.as_str()) {
                return Err(PlannerError::NotFound {
                    what: "class",
                    name: class.clone(),
                });
            }
            if !(factor.is_finite() && *factor >= 1.0) {
                return Err(invalid(
                    "workload",
                    class,
                    "factor",
                    format!("must be >= 1, got {factor}"),
                ));
            }
            Ok(())
        }
        BudgetAction::CapGpuShare { max_share, .. } if !(0.0..=1.0).contains(max_share) => {
            Err(invalid(
                "workload",
                "budget.policy",
                "max_share",
                format!("must be in 0..=1, got {max_share}"),
            ))
        }
        _ => Ok(()),
    }
}

fn check_fallback(g: &GpuFallbackSpec) -> Result<()> {
    const W: &str = "workload";
    match g {
        GpuFallbackSpec::Instance {
            instance,
            output_tokens_per_s,
            ttft_p99_s,
            tpot_p99_s,
            ..
        } => {
            positive(
                W,
                instance,
                "gpu_fallback.output_tokens_per_s",
                *output_tokens_per_s,
            )?;
            positive(W, instance, "gpu_fallback.ttft_p99_s", *ttft_p99_s)?;
            positive(W, instance, "gpu_fallback.tpot_p99_s", *tpot_p99_s)
        }
        GpuFallbackSpec::PerToken {
            endpoint,
            ttft_p99_s,
            tpot_p99_s,
            ..
        } => {
            positive(W, endpoint, "gpu_fallback.ttft_p99_s", *ttft_p99_s)?;
            positive(W, endpoint, "gpu_fallback.tpot_p99_s", *tpot_p99_s)
        }
    }
}

/// Parses a trace: header `timestamp_s,class,prompt_tokens,output_tokens`, one request per line, class
/// by name. Records are returned sorted by time.
///
/// # Errors
/// [`PlannerError::Csv`] naming the 1-based line and the field.
pub fn parse_trace_csv(csv: &str, classes: &[&str]) -> Result<Vec<TraceRecord>> {
    let mut lines = csv
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .map(|(_, l)| l.split(',').map(str::trim).collect())
        .unwrap_or_default();
    if header != ["timestamp_s", "class", "prompt_tokens", "output_tokens"] {
        let problem = "header must be `timestamp_s,class,prompt_tokens,output_tokens`".to_string();
        return Err(PlannerError::Csv { line: 1, problem });
    }
    let mut out = Vec::new();
    for (i, l) in lines {
        let line = i + 1;
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        if f.len() != 4 {
            return Err(PlannerError::Csv {
                line,
                problem: format!("expected 4 fields, got {}", f.len()),
            });
        }
        let num = |k: usize, name: &str| -> Result<f64> {
            f[k].parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| PlannerError::Csv {
                    line,
                    problem: format!("{name} `{}` is not a number >= 0", f[k]),
                })
        };
        let t_s = num(0, "timestamp_s")?;
        if t_s > MAX_TRACE_SECONDS {
            return Err(PlannerError::Csv {
                line,
                problem: format!("timestamp_s {t_s} is beyond a year"),
            });
        }
        let class = classes
            .iter()
            .position(|c| *c == f[1])
            .ok_or_else(|| PlannerError::Csv {
                line,
                problem: format!("unknown class `{}`", f[1]),
            })?;
        let tokens = |k: usize, name: &str| -> Result<u32> {
            let v = num(k, name)?;
            if !(1.0..=MAX_TOKENS).contains(&v) {
                return Err(PlannerError::Csv {
                    line,
                    problem: format!("{name} must be 1..=1000000"),
                });
            }
            Ok(v as u32)
        };
        out.push(TraceRecord {
            t_s,
            class,
            prompt_tokens: tokens(2, "prompt_tokens")?,
            output_tokens: tokens(3, "output_tokens")?,
        });
    }
    out.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    Ok(out)
}

impl Workload {
    /// Parses and validates a workload without a trace.
    ///
    /// # Errors
    /// As [`WorkloadFile::from_toml_str`] and [`WorkloadFile::into_workload`].
    pub fn from_toml_str(s: &str) -> Result<Workload> {
        WorkloadFile::from_toml_str(s)?.into_workload(None)
    }

    /// Requests/s of each class in each hour of the day (trace hours folded onto one day).
    pub fn hourly_class_rates(&self) -> Vec<Vec<f64>> {
        let k = self.classes.len();
        match &self.arrivals {
            Arrivals::Hourly(rps) => rps
                .iter()
                .map(|r| self.classes.iter().map(|c| r * c.share).collect())
                .collect(),
            Arrivals::Trace(recs) => {
                let days = recs
                    .last()
                    .map_or(1.0, |r| (r.t_s / 86_400.0).floor() + 1.0);
                let mut out = vec![vec![0.0; k]; HOURS];
                for r in recs {
                    let h = ((r.t_s % 86_400.0) / 3600.0) as usize % HOURS;
                    out[h][r.class] += 1.0 / (3600.0 * days);
                }
                out
            }
        }
    }

    /// The same workload with every arrival rate multiplied by `k` (traces are time-compressed).
    pub fn scaled(&self, k: f64) -> Workload {
        let mut w = self.clone();
        match &mut w.arrivals {
            Arrivals::Hourly(rps) => rps.iter_mut().for_each(|r| *r *= k),
            Arrivals::Trace(recs) if k > 0.0 => {
                let n = recs.len();
                let mut scaled = Vec::with_capacity((n as f64 * k.ceil()) as usize);
                // Whole copies of the trace, each shifted by a fraction of a second, then thinning for the rest.
                let whole = k.floor() as usize;
                for copy in 0..whole {
                    scaled.extend(recs.iter().map(|r| TraceRecord {
                        t_s: r.t_s + copy as f64 * 1e-3,
                        ..*r
                    }));
                }
                let frac = k - whole as f64;
                let step = if frac > 0.0 {
                    (1.0 / frac).round().max(1.0) as usize
                } else {
                    0
                };
                if step > 0 {
                    scaled.extend(recs.iter().step_by(step).copied());
                }
                scaled.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
                *recs = scaled;
            }
            Arrivals::Trace(recs) => recs.clear(),
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const EXAMPLE: &str = include_str!("../examples/workload.toml");

    #[test]
    fn example_parses() {
        let w = Workload::from_toml_str(EXAMPLE).expect("example workload");
        assert_eq!(w.classes.len(), 3);
        let rates = w.hourly_class_rates();
        assert_eq!(rates.len(), 24);
        assert!(w.budget.per_day.is_some());
    }

    #[test]
    fn bad_workloads_name_the_key() {
        let e = Workload::from_toml_str(&EXAMPLE.replace("share = 0.5", "share = 0.7"))
            .expect_err("shares");
        assert!(e.to_string().contains("`share`"), "{e}");
        let e =
            Workload::from_toml_str(&EXAMPLE.replace("[[class]]", "[[clas]]")).expect_err("typo");
        assert!(
            e.to_string().contains("clas") && e.to_string().contains("line"),
            "{e}"
        );
    }

    #[test]
    fn trace_errors_name_the_line() {
        let ok = "timestamp_s,class,prompt_tokens,output_tokens\n0.5,chat,10,20\n0.1,extract,5,5\n";
        let recs = parse_trace_csv(ok, &["chat", "extract"]).expect("trace");
        assert_eq!(recs[0].class, 1);
        let bad =
            "timestamp_s,class,prompt_tokens,output_tokens\n0.5,chat,10,20\n0.7,chat,ten,20\n";
        let e = parse_trace_csv(bad, &["chat"]).expect_err("bad number");
        assert_eq!(
            e.to_string(),
            "trace line 3: prompt_tokens `ten` is not a number >= 0"
        );
        let e = parse_trace_csv("t,c\n", &["chat"]).expect_err("header");
        assert!(e.to_string().starts_with("trace line 1:"));
        let e = parse_trace_csv(&ok.replace("extract", "other"), &["chat", "extract"])
            .expect_err("class");
        assert!(
            e.to_string().contains("line 3") && e.to_string().contains("other"),
            "{e}"
        );
    }

    #[test]
    fn length_moments() {
        let d = LengthDist::LogNormal {
            mean: 200.0,
            sigma: 0.5,
            max: 4000.0,
        };
        assert!(d.p99() > d.mean());
        let u = LengthDist::Uniform {
            min: 10.0,
            max: 20.0,
        };
        assert_eq!(u.mean(), 15.0);
    }
}
