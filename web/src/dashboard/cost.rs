//! $ per 1M tokens for the config table, with the design's formula: $/h = rent + power kW x PUE x
//! $/kWh + ops; $ per 1M tokens = $/h / (tokens/s x 3600) x 1e6. Rents come from the store's catalog
//! prices (the latest price of each instance type).

use std::{collections::BTreeMap, fmt, str::FromStr};

use serde::Serialize;
use strata_controller::store::CatalogPriceRow;

/// How an instance is paid for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum PriceModel {
    /// Per hour, no commitment.
    #[default]
    OnDemand,
    /// Preemptible capacity.
    Spot,
    /// One-year committed use.
    Committed1y,
    /// Three-year committed use.
    Committed3y,
}

impl PriceModel {
    pub(crate) const ALL: [PriceModel; 4] = [
        PriceModel::OnDemand,
        PriceModel::Spot,
        PriceModel::Committed1y,
        PriceModel::Committed3y,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PriceModel::OnDemand => "on-demand",
            PriceModel::Spot => "spot",
            PriceModel::Committed1y => "committed-1y",
            PriceModel::Committed3y => "committed-3y",
        }
    }

    /// The rent of `price` under this model, if the catalog has it. The store keeps one committed-use
    /// rate, used for both terms.
    pub(crate) fn rent(self, price: &CatalogPriceRow) -> Option<f64> {
        match self {
            PriceModel::OnDemand => Some(price.on_demand_usd_per_hour),
            PriceModel::Spot => price.spot_usd_per_hour,
            PriceModel::Committed1y | PriceModel::Committed3y => price.committed_usd_per_hour,
        }
    }
}

impl fmt::Display for PriceModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PriceModel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PriceModel::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("unknown price model {s:?}: expected on-demand, spot, committed-1y or committed-3y")
            })
    }
}

/// The costs of the site an instance runs in, on top of its rent. The default is a cloud tenant:
/// power is in the rent, so PUE 1 and $0/kWh, no ops overhead.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct SiteCosts {
    pub(crate) pue: f64,
    pub(crate) usd_per_kwh: f64,
    pub(crate) ops_usd_per_hour: f64,
}

impl Default for SiteCosts {
    fn default() -> Self {
        SiteCosts {
            pue: 1.0,
            usd_per_kwh: 0.0,
            ops_usd_per_hour: 0.0,
        }
    }
}

/// The hourly cost of running `price` under `model` at `site`, or `None` when the catalog has no
/// such rate.
pub(crate) fn hourly_cost(
    price: &CatalogPriceRow,
    model: PriceModel,
    site: &SiteCosts,
) -> Option<f64> {
    let rent = model.rent(price)?;
    let power_kw = price.watts.unwrap_or(0.0) / 1000.0;
    Some(rent + power_kw * site.pue * site.usd_per_kwh + site.ops_usd_per_hour)
}

/// $ per 1M tokens for a machine costing `hourly` $/h that sustains `tokens_per_second`; `None` when
/// the rate is not positive and finite.
pub(crate) fn dollars_per_million_tokens(hourly: f64, tokens_per_second: f64) -> Option<f64> {
    if !(tokens_per_second.is_finite() && tokens_per_second > 0.0 && hourly.is_finite()) {
        return None;
    }
    Some(hourly / (tokens_per_second * 3600.0) * 1e6)
}

/// The latest price of each instance type, by name (the first provider and region when a name repeats).
pub(crate) fn latest_by_instance(
    prices: Vec<CatalogPriceRow>,
) -> BTreeMap<String, CatalogPriceRow> {
    let mut latest: BTreeMap<String, CatalogPriceRow> = BTreeMap::new();
    for price in prices {
        match latest.get(&price.instance_type) {
            Some(seen) if seen.price_date >= price.price_date => {}
            _ => {
                latest.insert(price.instance_type.clone(), price);
            }
        }
    }
    latest
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;
    use strata_controller::store::CatalogPriceId;

    use super::*;

    fn price(name: &str, day: u32, on_demand: f64) -> CatalogPriceRow {
        CatalogPriceRow {
            id: CatalogPriceId(1),
            provider: "gcp".to_owned(),
            region: "us-central1".to_owned(),
            instance_type: name.to_owned(),
            vcpus: 8,
            memory_gib: 32.0,
            accelerator: None,
            accelerator_count: 0,
            on_demand_usd_per_hour: on_demand,
            spot_usd_per_hour: Some(on_demand / 2.0),
            committed_usd_per_hour: None,
            watts: Some(200.0),
            source: "test".to_owned(),
            price_date: NaiveDate::from_ymd_opt(2026, 1, day).unwrap(),
        }
    }

    #[test]
    fn one_dollar_an_hour_at_1000_tokens_per_second() {
        // 3.6M tokens an hour for $1: $0.2778 per 1M.
        let per_million = dollars_per_million_tokens(1.0, 1000.0).unwrap();
        assert!((per_million - 1.0 / 3.6).abs() < 1e-12);
        assert_eq!(dollars_per_million_tokens(1.0, 0.0), None);
        assert_eq!(dollars_per_million_tokens(1.0, f64::NAN), None);
    }

    #[test]
    fn hourly_cost_adds_power_and_ops_to_the_rent() {
        let p = price("c4", 1, 0.40);
        let cloud = hourly_cost(&p, PriceModel::OnDemand, &SiteCosts::default()).unwrap();
        assert_eq!(cloud, 0.40);
        let site = SiteCosts {
            pue: 1.5,
            usd_per_kwh: 0.10,
            ops_usd_per_hour: 0.05,
        };
        // 0.2 kW x 1.5 x $0.10 = $0.03.
        let on_prem = hourly_cost(&p, PriceModel::Spot, &site).unwrap();
        assert!((on_prem - (0.20 + 0.03 + 0.05)).abs() < 1e-12);
        assert_eq!(hourly_cost(&p, PriceModel::Committed1y, &site), None);
    }

    #[test]
    fn price_models_parse_by_their_command_line_names() {
        for m in PriceModel::ALL {
            assert_eq!(m.as_str().parse::<PriceModel>(), Ok(m));
        }
        assert!(
            "reserved"
                .parse::<PriceModel>()
                .unwrap_err()
                .contains("on-demand")
        );
    }

    #[test]
    fn the_latest_price_of_each_instance_wins() {
        let latest = latest_by_instance(vec![
            price("a", 1, 1.0),
            price("a", 3, 2.0),
            price("b", 2, 3.0),
        ]);
        assert_eq!(latest["a"].on_demand_usd_per_hour, 2.0);
        assert_eq!(latest.len(), 2);
    }
}
