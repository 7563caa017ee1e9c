//! The price catalog: instance types billed per hour (CPU and GPU) and endpoints billed per token, each price
//! with its source and date. Parsed from TOML; a builtin catalog of public list prices ships in the crate.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{PlannerError, Result, invalid, non_negative, positive};

/// Hours in a billing month, used to turn committed-use prices (quoted per month) into $/hour: 730 h
/// (365 days x 24 h / 12 months), the figure cloud price lists use.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The builtin catalog's TOML text (public list prices, see `planner/catalog/builtin.toml`).
pub const BUILTIN_TOML: &str = include_str!("../catalog/builtin.toml");

/// How an instance is paid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PriceModel {
    /// Pay per hour, no commitment.
    #[default]
    #[serde(alias = "on-demand")]
    OnDemand,
    /// Preemptible capacity at the spot price.
    Spot,
    /// One-year committed use, quoted per month (serde "committed1y"; "committed_1y" also read).
    #[serde(alias = "committed_1y", alias = "committed-1y")]
    Committed1y,
    /// Three-year committed use, quoted per month (serde "committed3y"; "committed_3y" also read).
    #[serde(alias = "committed_3y", alias = "committed-3y")]
    Committed3y,
}

impl PriceModel {
    /// The command-line spelling ("on-demand", "spot", "committed-1y", "committed-3y").
    pub fn as_str(self) -> &'static str {
        match self {
            PriceModel::OnDemand => "on-demand",
            PriceModel::Spot => "spot",
            PriceModel::Committed1y => "committed-1y",
            PriceModel::Committed3y => "committed-3y",
        }
    }
}

impl fmt::Display for PriceModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PriceModel {
    type Err = PlannerError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "on-demand" | "on_demand" => Ok(PriceModel::OnDemand),
            "spot" => Ok(PriceModel::Spot),
            "committed-1y" | "committed_1y" => Ok(PriceModel::Committed1y),
            "committed-3y" | "committed_3y" => Ok(PriceModel::Committed3y),
            other => Err(PlannerError::UnknownPriceModel(other.to_string())),
        }
    }
}

/// One rentable machine type and its prices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceType {
    /// Cloud or site ("gcp", "aws", "onprem").
    pub provider: String,
    /// Region the prices apply to.
    pub region: String,
    /// Instance type name, e.g. "c4-standard-8".
    pub name: String,
    /// Virtual CPUs.
    pub vcpus: u32,
    /// Memory in GiB.
    pub memory_gib: f64,
    /// Accelerator, e.g. "1x NVIDIA L4 24 GB"; `None` for CPU-only types.
    #[serde(default)]
    pub accelerator: Option<String>,
    /// On-demand $/hour.
    pub on_demand_per_hour: f64,
    /// Spot $/hour, where published.
    #[serde(default)]
    pub spot_per_hour: Option<f64>,
    /// One-year committed $/month, where published.
    #[serde(default)]
    pub committed_1y_per_month: Option<f64>,
    /// Three-year committed $/month, where published.
    #[serde(default)]
    pub committed_3y_per_month: Option<f64>,
    /// Power draw in watts at load (its basis is stated in `source`).
    pub power_watts: f64,
    /// Where the prices (and the power figure) come from.
    pub source: String,
    /// Date of the prices, YYYY-MM-DD.
    pub price_date: String,
    /// Sustained memory bandwidth of the whole instance in GB/s, where known (used by the
    /// memory-bandwidth scaling rule; absent means that rule cannot apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bandwidth_gbs: Option<f64>,
}

impl InstanceType {
    /// $/hour under `model`; committed prices are per month divided by [`HOURS_PER_MONTH`].
    /// `None` when the catalog has no price for that model.
    pub fn hourly_price(&self, model: PriceModel) -> Option<f64> {
        match model {
            PriceModel::OnDemand => Some(self.on_demand_per_hour),
            PriceModel::Spot => self.spot_per_hour,
            PriceModel::Committed1y => self.committed_1y_per_month.map(|m| m / HOURS_PER_MONTH),
            PriceModel::Committed3y => self.committed_3y_per_month.map(|m| m / HOURS_PER_MONTH),
        }
    }

    /// True when the type carries an accelerator.
    pub fn is_gpu(&self) -> bool {
        self.accelerator
            .as_deref()
            .is_some_and(|a| !a.trim().is_empty())
    }

    fn validate(&self) -> Result<()> {
        const W: &str = "catalog";
        let e = self.name.as_str();
        if self.name.trim().is_empty() {
            return Err(invalid(
                W,
                "(unnamed instance)",
                "name",
                "must not be empty".into(),
            ));
        }
        if self.vcpus == 0 {
            return Err(invalid(W, e, "vcpus", "must be > 0".into()));
        }
        positive(W, e, "memory_gib", self.memory_gib)?;
        non_negative(W, e, "on_demand_per_hour", self.on_demand_per_hour)?;
        let optional = [
            ("spot_per_hour", self.spot_per_hour),
            ("committed_1y_per_month", self.committed_1y_per_month),
            ("committed_3y_per_month", self.committed_3y_per_month),
            ("mem_bandwidth_gbs", self.mem_bandwidth_gbs),
        ];
        for (key, v) in optional {
            if let Some(v) = v {
                non_negative(W, e, key, v)?;
            }
        }
        non_negative(W, e, "power_watts", self.power_watts)?;
        check_source_and_date(e, &self.source, &self.price_date)
    }
}

/// A GPU fallback sold per token (a hosted API).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenPricedEndpoint {
    /// Vendor.
    pub provider: String,
    /// Endpoint or model name.
    pub name: String,
    /// $ per 1M input (prompt) tokens.
    pub input_per_million: f64,
    /// $ per 1M output tokens.
    pub output_per_million: f64,
    /// Where the price comes from.
    pub source: String,
    /// Date of the price, YYYY-MM-DD.
    pub price_date: String,
}

impl TokenPricedEndpoint {
    /// $ for one request with the given token counts.
    pub fn request_cost(&self, prompt_tokens: f64, output_tokens: f64) -> f64 {
        (prompt_tokens * self.input_per_million + output_tokens * self.output_per_million) / 1e6
    }

    fn validate(&self) -> Result<()> {
        const W: &str = "catalog";
        let e = self.name.as_str();
        if self.name.trim().is_empty() {
            return Err(invalid(
                W,
                "(unnamed endpoint)",
                "name",
                "must not be empty".into(),
            ));
        }
        non_negative(W, e, "input_per_million", self.input_per_million)?;
        non_negative(W, e, "output_per_million", self.output_per_million)?;
        check_source_and_date(e, &self.source, &self.price_date)
    }
}

/// Instance types and token-priced endpoints.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Catalog {
    /// Hourly-priced instance types (TOML `[[instance]]`).
    pub instances: Vec<InstanceType>,
    /// Per-token priced endpoints (TOML `[[token_priced]]`).
    pub token_priced: Vec<TokenPricedEndpoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    instance: Vec<InstanceType>,
    #[serde(default)]
    token_priced: Vec<TokenPricedEndpoint>,
}

impl Catalog {
    /// The catalog shipped with the crate: public list prices with their sources and dates.
    pub fn builtin() -> Catalog {
        // The builtin text is a compile-time constant checked by a unit test; an empty catalog is the
        // non-panicking answer should it ever fail to parse.
        Catalog::from_toml_str(BUILTIN_TOML).unwrap_or_default()
    }

    /// Parses a catalog file (`[[instance]]` and `[[token_priced]]` tables) and validates every entry.
    ///
    /// # Errors
    /// [`PlannerError::Toml`] with line and key for syntax or shape errors, unknown keys included;
    /// [`PlannerError::InvalidField`] naming the entry and key for bad values.
    pub fn from_toml_str(s: &str) -> Result<Catalog> {
        let file: CatalogFile = toml::from_str(s).map_err(|e| PlannerError::Toml {
            what: "catalog",
            message: e.to_string(),
        })?;
        let catalog = Catalog {
            instances: file.instance,
            token_priced: file.token_priced,
        };
        for i in &catalog.instances {
            i.validate()?;
        }
        for t in &catalog.token_priced {
            t.validate()?;
        }
        Ok(catalog)
    }

    /// Adds `other`'s entries; an entry with the same provider, region and name (or provider and name
    /// for endpoints) replaces the existing one, so user catalogs override builtin prices.
    pub fn merge(&mut self, other: Catalog) {
        for i in other.instances {
            let same = |x: &InstanceType| {
                x.provider == i.provider && x.region == i.region && x.name == i.name
            };
            match self.instances.iter_mut().find(|x| same(x)) {
                Some(slot) => *slot = i,
                None => self.instances.push(i),
            }
        }
        for t in other.token_priced {
            match self
                .token_priced
                .iter_mut()
                .find(|x| x.provider == t.provider && x.name == t.name)
            {
                Some(slot) => *slot = t,
                None => self.token_priced.push(t),
            }
        }
    }

    /// The first instance type called `name` (catalog order; the builtin lists us-central1 first).
    pub fn find(&self, name: &str) -> Option<&InstanceType> {
        self.instances.iter().find(|i| i.name == name)
    }

    /// The instance type called `name` in `region`.
    pub fn find_in(&self, name: &str, region: &str) -> Option<&InstanceType> {
        self.instances
            .iter()
            .find(|i| i.name == name && i.region == region)
    }

    /// The CPU instance type a host with `vcpus` hardware threads is taken to be: the cheapest
    /// on-demand type with exactly that many vCPUs, else the cheapest with more (the smallest that
    /// fits the host's setup), else the largest there is. `None` when the catalog has no CPU type.
    pub fn cpu_instance_for_host(&self, vcpus: u32) -> Option<&InstanceType> {
        let cpu = || self.instances.iter().filter(|i| !i.is_gpu());
        let cheapest = |a: &&InstanceType, b: &&InstanceType| {
            a.on_demand_per_hour
                .total_cmp(&b.on_demand_per_hour)
                .then(a.vcpus.cmp(&b.vcpus))
        };
        cpu()
            .filter(|i| i.vcpus == vcpus)
            .min_by(cheapest)
            .or_else(|| cpu().filter(|i| i.vcpus > vcpus).min_by(cheapest))
            .or_else(|| cpu().max_by_key(|i| i.vcpus))
    }

    /// The token-priced endpoint called `name`.
    pub fn find_endpoint(&self, name: &str) -> Option<&TokenPricedEndpoint> {
        self.token_priced.iter().find(|t| t.name == name)
    }
}

fn check_source_and_date(entry: &str, source: &str, date: &str) -> Result<()> {
    if source.trim().is_empty() {
        return Err(invalid(
            "catalog",
            entry,
            "source",
            "must say where the price comes from".into(),
        ));
    }
    if !is_iso_date(date) {
        return Err(invalid(
            "catalog",
            entry,
            "price_date",
            format!("must be YYYY-MM-DD, got `{date}`"),
        ));
    }
    Ok(())
}

fn is_iso_date(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    if b.len() != 10
        || b[4] != b'-'
        || b[7] != b'-'
        || !digits(0..4)
        || !digits(5..7)
        || !digits(8..10)
    {
        return false;
    }
    let month = (b[5] - b'0') * 10 + (b[6] - b'0');
    let day = (b[8] - b'0') * 10 + (b[9] - b'0');
    (1..=12).contains(&month) && (1..=31).contains(&day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_parses_and_has_the_anchor_prices() {
        let c = Catalog::from_toml_str(BUILTIN_TOML).expect("builtin catalog parses");
        let c4 = c.find("c4-standard-8").expect("c4-standard-8");
        assert_eq!(c4.on_demand_per_hour, 0.39534);
        assert_eq!(c4.hourly_price(PriceModel::Spot), Some(0.23721));
        let h = c4.hourly_price(PriceModel::Committed1y).expect("1y price");
        assert!((h - 181.82 / 730.0).abs() < 1e-12);
        assert!(!c4.is_gpu());
        assert!(c.find("g2-standard-8").expect("g2").is_gpu());
        assert!(c.find("a3-highgpu-1g").expect("a3").is_gpu());
        assert_eq!(
            c.find_in("c4-standard-8", "europe-west4")
                .map(|i| i.on_demand_per_hour),
            Some(0.41511)
        );
    }

    #[test]
    fn price_model_round_trips_through_its_spelling() {
        for m in [
            PriceModel::OnDemand,
            PriceModel::Spot,
            PriceModel::Committed1y,
            PriceModel::Committed3y,
        ] {
            assert_eq!(m.as_str().parse::<PriceModel>(), Ok(m));
        }
        assert!(matches!(
            "reserved".parse::<PriceModel>(),
            Err(PlannerError::UnknownPriceModel(_))
        ));
        assert_eq!(
            serde_json::to_string(&PriceModel::Committed1y)
                .ok()
                .as_deref(),
            Some("\"committed1y\"")
        );
    }

    #[test]
    fn price_model_reads_common_spellings() {
        for (text, m) in [
            ("\"committed_3y\"", PriceModel::Committed3y),
            ("\"on-demand\"", PriceModel::OnDemand),
        ] {
            assert_eq!(serde_json::from_str::<PriceModel>(text).ok(), Some(m));
        }
    }

    #[test]
    fn bad_values_name_the_entry_and_key() {
        let bad = r#"
[[instance]]
provider = "x"
region = "r"
name = "box"
vcpus = 4
memory_gib = 8
on_demand_per_hour = -1.0
power_watts = 10
source = "s"
price_date = "2026-01-01"
"#;
        let err = Catalog::from_toml_str(bad).expect_err("negative price");
        assert_eq!(
            err.to_string(),
            "catalog: box: `on_demand_per_hour` must be a finite number >= 0, got -1"
        );
        let typo = bad.replace("power_watts", "power_wats");
        let err = Catalog::from_toml_str(&typo)
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("power_wats") && err.contains("line"), "{err}");
        let date = bad
            .replace("-1.0", "1.0")
            .replace("2026-01-01", "2026-13-01");
        let err = Catalog::from_toml_str(&date)
            .expect_err("bad date")
            .to_string();
        assert!(err.contains("price_date"), "{err}");
    }

    #[test]
    fn a_host_is_taken_for_the_type_of_its_vcpus_or_the_cheapest_that_fits() {
        let c = Catalog::builtin();
        let name = |vcpus| c.cpu_instance_for_host(vcpus).map(|i| i.name.as_str());
        assert_eq!(name(16), Some("c4-standard-16"));
        // No 2-vCPU type in the builtin catalog: the cheapest larger one.
        assert_eq!(name(2), Some("c4-standard-8"));
        // Larger than any type: the largest.
        assert_eq!(name(100_000), Some("c3-standard-176"));
        assert!(Catalog::default().cpu_instance_for_host(8).is_none());
    }

    #[test]
    fn merge_overrides_same_entry_and_appends_new_ones() {
        let mut c = Catalog::builtin();
        let n = c.instances.len();
        let mut mine = c.find("c4-standard-8").cloned().expect("c4");
        mine.on_demand_per_hour = 0.1;
        let mut other = mine.clone();
        other.name = "my-box".into();
        c.merge(Catalog {
            instances: vec![mine, other],
            token_priced: vec![],
        });
        assert_eq!(c.instances.len(), n + 1);
        assert_eq!(
            c.find("c4-standard-8").map(|i| i.on_demand_per_hour),
            Some(0.1)
        );
    }
}
