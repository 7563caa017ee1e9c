//! Plain-text rendering of a plan for the command line: the hourly table, totals, degradations,
//! sensitivity and the simulator's check. Pure string building.

use std::fmt::Write;

use crate::plan::Plan;
use crate::profile::Provenance;
use crate::workload::GpuPricing;

fn money(x: f64) -> String {
    format!("${x:.2}")
}

fn opt_money(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".to_string(), |v| format!("${v:.4}"))
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

impl Plan {
    /// The plan as a text table (what `strata plan` prints without `--json`).
    pub fn render_table(&self) -> String {
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = self.write_table(&mut s);
        s
    }

    fn write_table(&self, s: &mut String) -> std::fmt::Result {
        let c = &self.chosen;
        let label = c.provenance.label();
        writeln!(s, "plan for workload `{}`", self.workload)?;
        writeln!(
            s,
            "config      {} ({} {}), {}",
            c.config, c.model, c.weights, label
        )?;
        writeln!(
            s,
            "cpu pool    {} {} at {}/h {}, scaled {} x{:.2}",
            c.instance_type,
            c.region,
            format_args!("${:.4}", c.hourly_cost),
            self.price_model,
            c.scaling.rule.as_str(),
            c.scaling.factor
        )?;
        let g = &self.gpu_fallback;
        let price = match g.pricing {
            GpuPricing::PerInstanceHour {
                hourly_cost,
                output_tokens_per_s,
            } => {
                format!(
                    "${hourly_cost:.4}/h per instance, {output_tokens_per_s:.0} output tok/s each"
                )
            }
            GpuPricing::PerToken {
                input_per_million,
                output_per_million,
            } => {
                format!("${input_per_million:.3}/1M in, ${output_per_million:.3}/1M out")
            }
        };
        writeln!(
            s,
            "gpu         {} ({price}), p99 ttft {:.2}s tpot {:.3}s",
            g.name, g.ttft_p99_s, g.tpot_p99_s
        )?;
        writeln!(
            s,
            "knobs       headroom {}, scale-up lag {} min, min pool {}",
            pct(self.headroom),
            self.scale_up_lag_minutes,
            self.min_pool
        )?;
        writeln!(s)?;
        write!(s, "hour    rps  cpu warm gpu  util")?;
        let names: Vec<&str> = self
            .hours
            .first()
            .map(|h| h.classes.iter().map(|c| c.class.as_str()).collect())
            .unwrap_or_default();
        for n in &names {
            write!(s, " {:>12}", format!("{}->gpu", short(n)))?;
        }
        writeln!(s, "      $/h  degraded")?;
        for h in &self.hours {
            write!(
                s,
                "{:02}  {:>6.2} {:>4} {:>4} {:>3} {:>5}",
                h.hour,
                h.rps,
                h.cpu_instances,
                h.warm_instances,
                h.gpu_instances,
                format!("{:.0}%", h.cpu_utilization * 100.0)
            )?;
            for c in &h.classes {
                write!(s, " {:>12}", pct(c.gpu_share))?;
            }
            let deg: Vec<String> = h
                .degraded
                .iter()
                .map(|d| format!("{}:{}", d.class, d.metric))
                .collect();
            writeln!(
                s,
                " {:>8.4}  {}",
                h.cost,
                if deg.is_empty() {
                    "-".to_string()
                } else {
                    deg.join(",")
                }
            )?;
        }
        let t = &self.totals;
        writeln!(s)?;
        writeln!(
            s,
            "per day     {} (cpu {}, gpu {}), {:.0} requests, gpu share {}",
            money(t.cost_per_day),
            money(t.cpu_cost_per_day),
            money(t.gpu_cost_per_day),
            t.requests_per_day,
            pct(t.gpu_share)
        )?;
        writeln!(
            s,
            "per 1M tok  {} output, {} total",
            opt_money(t.dollars_per_million_output),
            opt_money(t.dollars_per_million_total)
        )?;
        writeln!(
            s,
            "all-GPU     {} per day; savings {} per day ({})",
            money(t.all_gpu_cost_per_day),
            money(t.savings_per_day),
            pct(t.savings_fraction)
        )?;
        match t.budget_per_day {
            Some(b) => writeln!(
                s,
                "budget      {} per day: {}",
                money(b),
                if t.within_budget { "within" } else { "OVER" }
            )?,
            None => writeln!(s, "budget      none")?,
        }
        if self.degraded.is_empty() {
            writeln!(s, "sla         every class meets its p99 SLA in every hour")?;
        } else {
            for d in &self.degraded {
                if d.metric == "shed" {
                    writeln!(
                        s,
                        "DEGRADED    {}: up to {} of requests rejected in an hour",
                        d.class,
                        pct(d.predicted)
                    )?;
                } else {
                    let over = d.predicted / d.target - 1.0;
                    writeln!(
                        s,
                        "DEGRADED    {}: {} up to {:.2}s against {:.2}s (+{})",
                        d.class,
                        d.metric,
                        d.predicted,
                        d.target,
                        pct(over)
                    )?;
                }
            }
        }
        if !self.sensitivity.is_empty() {
            writeln!(s)?;
            writeln!(
                s,
                "sensitivity        $/day   $/1M out  gpu share  peak cpu  config / instance"
            )?;
            for sc in &self.sensitivity {
                writeln!(
                    s,
                    "{:<14} {:>9} {:>10} {:>10} {:>9}  {} / {}{}",
                    sc.label,
                    money(sc.cost_per_day),
                    opt_money(sc.dollars_per_million_output),
                    pct(sc.gpu_share),
                    sc.peak_cpu_instances,
                    sc.config,
                    sc.instance_type,
                    if sc.degraded_classes.is_empty() {
                        String::new()
                    } else {
                        format!(", degraded: {}", sc.degraded_classes.join(","))
                    }
                )?;
            }
        }
        if let Some(v) = &self.validation {
            writeln!(s)?;
            writeln!(
                s,
                "simulated   {} day(s), seed {}, {} requests, gpu share {}, rejected {}, {} per day",
                v.days,
                v.seed,
                v.requests,
                pct(v.gpu_share),
                pct(v.rejected_share),
                money(v.cost_per_day)
            )?;
            for c in &v.classes {
                let sla =
                    |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.2}s"));
                writeln!(
                    s,
                    "  {:<12} p99 ttft {:.2}s (sla {}), e2e {:.2}s (sla {}), attainment {}, gpu {}{}",
                    c.class,
                    c.ttft_p99_s,
                    sla(c.sla.ttft_p99_s),
                    c.e2e_p99_s,
                    sla(c.sla.e2e_p99_s),
                    pct(c.attainment),
                    pct(c.gpu_share),
                    if c.meets_sla { "" } else { "  MISSES SLA" }
                )?;
            }
        }
        if !self.candidates.is_empty() {
            writeln!(s)?;
            writeln!(
                s,
                "cheapest candidates (at the highest load meeting every CPU-feasible SLA, after headroom)"
            )?;
            writeln!(
                s,
                "config              instance (region)                 rule      x     $/h   sla rps  $/1M out  $/1M total    $/day"
            )?;
            for c in &self.candidates {
                writeln!(
                    s,
                    "{:<19} {:<33} {:<8} {:>5.1} {:>7.4} {:>8.3} {:>9} {:>11} {:>8.2}{}{}",
                    short_to(&c.config, 19),
                    format!("{} ({})", c.instance_type, c.region),
                    c.scaling.rule.as_str(),
                    c.scaling.factor,
                    c.hourly_cost,
                    c.sla_rps,
                    opt_money(c.dollars_per_million_output),
                    opt_money(c.dollars_per_million_total),
                    c.day_cost,
                    match &c.provenance {
                        Provenance::Measured => String::new(),
                        Provenance::Estimated { .. } => " (estimate)".to_string(),
                        Provenance::SyntheticWeights =>
                            format!(" ({})", Provenance::SYNTHETIC_LABEL),
                    },
                    if c.infeasible_classes.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " [CPU misses SLA at any load: {}]",
                            c.infeasible_classes.join(",")
                        )
                    }
                )?;
            }
        }
        Ok(())
    }
}

fn short(s: &str) -> &str {
    short_to(s, 7)
}

fn short_to(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
