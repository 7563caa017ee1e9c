//! Total cost of ownership: $/hour = rent + power x PUE x $/kWh + ops overhead, and $ per 1M tokens at a
//! given sustained token rate. Site costs default to a cloud tenant's view (power is in the rent).

use serde::{Deserialize, Serialize};

use crate::catalog::{InstanceType, PriceModel};

/// Costs of the site an instance runs in, on top of its rent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteCosts {
    /// Power usage effectiveness (facility power / IT power), >= 1.
    pub pue: f64,
    /// $ per kWh of facility energy.
    pub energy_price_per_kwh: f64,
    /// Operations overhead per instance-hour (staff, monitoring, licences).
    pub ops_per_hour: f64,
}

impl Default for SiteCosts {
    /// A cloud tenant: PUE 1.0 and $0/kWh because cloud rent already pays for power and cooling (adding
    /// them again would double count), and no ops overhead. Use [`SiteCosts::on_prem`] for owned hardware.
    fn default() -> Self {
        SiteCosts {
            pue: 1.0,
            energy_price_per_kwh: 0.0,
            ops_per_hour: 0.0,
        }
    }
}

impl SiteCosts {
    /// A stated on-premises starting point: PUE 1.5 (typical enterprise data centre) and $0.10/kWh;
    /// no ops overhead. Replace with the site's own figures.
    pub fn on_prem() -> Self {
        SiteCosts {
            pue: 1.5,
            energy_price_per_kwh: 0.10,
            ops_per_hour: 0.0,
        }
    }
}

/// The terms of one instance-hour's cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CostInputs {
    /// Rent, $/hour.
    pub rent_per_hour: f64,
    /// Power draw, watts.
    pub power_watts: f64,
    /// Power usage effectiveness.
    pub pue: f64,
    /// $ per kWh.
    pub energy_price_per_kwh: f64,
    /// Ops overhead, $/hour.
    pub ops_per_hour: f64,
}

impl CostInputs {
    /// rent + power kW x PUE x $/kWh + ops, in $/hour.
    pub fn hourly_cost(&self) -> f64 {
        self.rent_per_hour
            + self.power_watts / 1000.0 * self.pue * self.energy_price_per_kwh
            + self.ops_per_hour
    }

    /// The cost terms of instance `i` paid under `m` at `site`; `None` when the catalog has no `m` price.
    pub fn for_instance(i: &InstanceType, m: PriceModel, site: &SiteCosts) -> Option<CostInputs> {
        Some(CostInputs {
            rent_per_hour: i.hourly_price(m)?,
            power_watts: i.power_watts,
            pue: site.pue,
            energy_price_per_kwh: site.energy_price_per_kwh,
            ops_per_hour: site.ops_per_hour,
        })
    }
}

/// $ per 1M tokens for a machine costing `hourly_cost` $/h that sustains `tokens_per_second`;
/// `None` when the rate is not positive (or not finite).
pub fn dollars_per_million_tokens(hourly_cost: f64, tokens_per_second: f64) -> Option<f64> {
    if !(tokens_per_second.is_finite() && tokens_per_second > 0.0) {
        return None;
    }
    Some(hourly_cost / (tokens_per_second * 3600.0) * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn hourly_cost_adds_power_and_ops() {
        let c = CostInputs {
            rent_per_hour: 1.0,
            power_watts: 500.0,
            pue: 1.5,
            energy_price_per_kwh: 0.2,
            ops_per_hour: 0.05,
        };
        assert!((c.hourly_cost() - (1.0 + 0.5 * 1.5 * 0.2 + 0.05)).abs() < 1e-12);
    }

    #[test]
    fn default_site_is_rent_only() {
        let cat = Catalog::builtin();
        let i = cat.find("c4-standard-8").expect("c4");
        let c = CostInputs::for_instance(i, PriceModel::OnDemand, &SiteCosts::default())
            .expect("price");
        assert_eq!(c.hourly_cost(), 0.39534);
        let g5 = cat.find("g5.xlarge").expect("g5");
        assert!(CostInputs::for_instance(g5, PriceModel::Spot, &SiteCosts::default()).is_none());
    }

    #[test]
    fn dollars_per_million() {
        assert_eq!(dollars_per_million_tokens(3.6, 1000.0), Some(1.0));
        assert_eq!(dollars_per_million_tokens(3.6, 0.0), None);
        assert_eq!(dollars_per_million_tokens(3.6, -1.0), None);
        assert_eq!(dollars_per_million_tokens(3.6, f64::NAN), None);
    }
}
