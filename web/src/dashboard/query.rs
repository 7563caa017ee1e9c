//! URL query parameters, parsed once into validated values: a bad value is a 400 that names the
//! parameter and what it accepts, never a panic or a silently ignored filter.

use std::collections::{BTreeMap, HashMap};

use strata_controller::store::{ConfigSort, HardwareId};
use strata_planner::{catalog::PriceModel, tco::SiteCosts};

use super::error::DashboardError;

/// The price models the page offers, in the picker's order.
pub(crate) const PRICE_MODELS: [PriceModel; 4] = [
    PriceModel::OnDemand,
    PriceModel::Spot,
    PriceModel::Committed1y,
    PriceModel::Committed3y,
];

/// The default and largest number of rows of the config table.
pub(crate) const DEFAULT_LIMIT: i64 = 200;
/// See [`DEFAULT_LIMIT`].
pub(crate) const MAX_LIMIT: i64 = 1000;

/// What the config table is sorted by: a store column, or the computed $ per 1M tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SortKey {
    /// $ per 1M output tokens (unpriced configs last).
    Cost,
    /// A column the store sorts by.
    Store(ConfigSort),
}

impl SortKey {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SortKey::Cost => "cost",
            SortKey::Store(sort) => sort.as_str(),
        }
    }

    /// Cheapest, fastest and lowest-latency first; most throughput, capacity and agreement first.
    fn default_descending(self) -> bool {
        matches!(
            self,
            SortKey::Store(
                ConfigSort::StartedAt
                    | ConfigSort::OutputTokensPerS
                    | ConfigSort::Capacity
                    | ConfigSort::Top1Agreement
            )
        )
    }
}

/// The config page's parameters.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfigsParams {
    pub(crate) model: Option<String>,
    pub(crate) weights: Option<String>,
    pub(crate) host: Option<HardwareId>,
    pub(crate) threads: Option<i64>,
    pub(crate) batch: Option<i64>,
    pub(crate) numa: Option<String>,
    pub(crate) sort: SortKey,
    pub(crate) descending: bool,
    pub(crate) limit: i64,
    pub(crate) instance: Option<String>,
    pub(crate) gpu_instance: Option<String>,
    pub(crate) price: PriceModel,
    pub(crate) site: SiteCosts,
}

impl ConfigsParams {
    /// Parses the config page's parameters; unknown parameters are ignored, empty ones mean "any".
    pub(crate) fn parse(raw: &HashMap<String, String>) -> Result<Self, DashboardError> {
        let text = |name: &str| {
            raw.get(name)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let sort = match text("sort").as_deref() {
            None | Some("cost") => SortKey::Cost,
            Some(name) => SortKey::Store(name.parse::<ConfigSort>().map_err(|_| {
                DashboardError::bad_query(
                    "sort",
                    format!(
                        "unknown sort key {name:?}: expected cost, {}",
                        ConfigSort::ALL.map(ConfigSort::as_str).join(", ")
                    ),
                )
            })?),
        };
        let descending = match text("dir").as_deref() {
            None => sort.default_descending(),
            Some("asc") => false,
            Some("desc") => true,
            Some(other) => {
                return Err(DashboardError::bad_query(
                    "dir",
                    format!("{other:?} is not asc or desc"),
                ));
            }
        };
        let price = match text("price") {
            None => PriceModel::default(),
            Some(name) => name.parse().map_err(|_| {
                DashboardError::bad_query(
                    "price",
                    format!(
                        "unknown price model {name:?}: expected {}",
                        PRICE_MODELS.map(PriceModel::as_str).join(", ")
                    ),
                )
            })?,
        };
        let defaults = SiteCosts::default();
        let site = SiteCosts {
            pue: float(raw, "pue", 1.0, 10.0)?.unwrap_or(defaults.pue),
            energy_price_per_kwh: float(raw, "kwh_usd", 0.0, 10.0)?
                .unwrap_or(defaults.energy_price_per_kwh),
            ops_per_hour: float(raw, "ops_usd_per_hour", 0.0, 1e6)?
                .unwrap_or(defaults.ops_per_hour),
        };
        Ok(ConfigsParams {
            model: text("model"),
            weights: text("weights"),
            host: integer(raw, "host", 1, i64::MAX)?.map(HardwareId),
            threads: integer(raw, "threads", 1, 1 << 20)?,
            batch: integer(raw, "batch", 1, 1 << 20)?,
            numa: text("numa"),
            sort,
            descending,
            limit: integer(raw, "limit", 1, MAX_LIMIT)?.unwrap_or(DEFAULT_LIMIT),
            instance: text("instance"),
            gpu_instance: text("gpu_instance"),
            price,
            site,
        })
    }

    /// The parameters as they would appear in a link, defaults left out.
    pub(crate) fn to_pairs(&self) -> BTreeMap<&'static str, String> {
        let mut pairs = BTreeMap::new();
        let mut put = |key: &'static str, value: Option<String>| {
            if let Some(value) = value {
                pairs.insert(key, value);
            }
        };
        put("model", self.model.clone());
        put("weights", self.weights.clone());
        put("host", self.host.map(|h| h.to_string()));
        put("threads", self.threads.map(|t| t.to_string()));
        put("batch", self.batch.map(|b| b.to_string()));
        put("numa", self.numa.clone());
        put("sort", Some(self.sort.as_str().to_owned()));
        put(
            "dir",
            Some(if self.descending { "desc" } else { "asc" }.to_owned()),
        );
        put(
            "limit",
            (self.limit != DEFAULT_LIMIT).then(|| self.limit.to_string()),
        );
        put("instance", self.instance.clone());
        put("gpu_instance", self.gpu_instance.clone());
        put(
            "price",
            (self.price != PriceModel::default()).then(|| self.price.to_string()),
        );
        let defaults = SiteCosts::default();
        put(
            "pue",
            (self.site.pue != defaults.pue).then(|| self.site.pue.to_string()),
        );
        put(
            "kwh_usd",
            (self.site.energy_price_per_kwh != defaults.energy_price_per_kwh)
                .then(|| self.site.energy_price_per_kwh.to_string()),
        );
        put(
            "ops_usd_per_hour",
            (self.site.ops_per_hour != defaults.ops_per_hour)
                .then(|| self.site.ops_per_hour.to_string()),
        );
        pairs
    }

    /// A link to the config page with these parameters, sorted by `sort` instead: the other direction
    /// when it is already the sort key, its default direction otherwise.
    pub(crate) fn sort_href(&self, sort: SortKey) -> String {
        let mut pairs = self.to_pairs();
        let descending = if sort == self.sort {
            !self.descending
        } else {
            sort.default_descending()
        };
        pairs.insert("sort", sort.as_str().to_owned());
        pairs.insert("dir", if descending { "desc" } else { "asc" }.to_owned());
        format!("/configs?{}", encode_pairs(&pairs))
    }
}

/// The gateway page's source filter: `None` (every source) unless `source` names one; `all` or empty
/// also means every source.
pub(crate) fn gateway_source(raw: &HashMap<String, String>) -> Option<String> {
    raw.get("source")
        .map(|v| v.trim())
        .filter(|v| !v.is_empty() && *v != "all")
        .map(str::to_owned)
}

/// The gateway page's window, in minutes.
pub(crate) fn window_minutes(raw: &HashMap<String, String>) -> Result<i64, DashboardError> {
    Ok(integer(raw, "window", 1, 7 * 24 * 60)?.unwrap_or(60))
}

fn integer(
    raw: &HashMap<String, String>,
    name: &'static str,
    min: i64,
    max: i64,
) -> Result<Option<i64>, DashboardError> {
    let Some(value) = raw.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match value.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(DashboardError::bad_query(
            name,
            format!("{value:?} is not a whole number from {min} to {max}"),
        )),
    }
}

fn float(
    raw: &HashMap<String, String>,
    name: &'static str,
    min: f64,
    max: f64,
) -> Result<Option<f64>, DashboardError> {
    let Some(value) = raw.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match value.parse::<f64>() {
        Ok(x) if x.is_finite() && (min..=max).contains(&x) => Ok(Some(x)),
        _ => Err(DashboardError::bad_query(
            name,
            format!("{value:?} is not a number from {min} to {max}"),
        )),
    }
}

/// `key=value&...`, percent-encoded.
pub(crate) fn encode_pairs(pairs: &BTreeMap<&'static str, String>) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes everything but unreserved characters.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_sort_by_cost_cheapest_first() {
        let params = ConfigsParams::parse(&raw(&[])).unwrap();
        assert_eq!(params.sort, SortKey::Cost);
        assert!(!params.descending);
        assert_eq!(params.limit, DEFAULT_LIMIT);
        assert_eq!(params.price, PriceModel::OnDemand);
    }

    #[test]
    fn values_are_checked_and_named() {
        for (key, value, needle) in [
            (
                "sort",
                "price",
                "query parameter sort: unknown sort key \"price\"",
            ),
            (
                "dir",
                "up",
                "query parameter dir: \"up\" is not asc or desc",
            ),
            (
                "limit",
                "0",
                "query parameter limit: \"0\" is not a whole number from 1 to 1000",
            ),
            ("threads", "many", "query parameter threads"),
            (
                "price",
                "reserved",
                "query parameter price: unknown price model",
            ),
            ("pue", "0.5", "query parameter pue"),
        ] {
            let err = ConfigsParams::parse(&raw(&[(key, value)])).unwrap_err();
            assert!(err.to_string().starts_with(needle), "{err}");
        }
    }

    #[test]
    fn sort_links_flip_the_current_key_and_keep_filters() {
        let params =
            ConfigsParams::parse(&raw(&[("sort", "ttft_p99"), ("model", "a b&c")])).unwrap();
        assert_eq!(
            params.sort_href(SortKey::Store(ConfigSort::TtftP99)),
            "/configs?dir=desc&model=a%20b%26c&sort=ttft_p99"
        );
        assert_eq!(
            params.sort_href(SortKey::Store(ConfigSort::OutputTokensPerS)),
            "/configs?dir=desc&model=a%20b%26c&sort=output_tokens_per_s"
        );
    }
}
