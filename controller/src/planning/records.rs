//! What planning records: prices from a catalog, plans and the workloads they plan for.

use chrono::NaiveDate;
use serde_json::Value;
use strata_planner::{
    catalog::{Catalog, HOURS_PER_MONTH, InstanceType},
    plan::Plan,
    workload::Workload,
};

use super::{PlanningError, Result};
use crate::store::{
    CatalogPriceRow, NewCatalogPrice, NewPlan, NewWorkload, PlanRow, Store, WorkloadRow, constraint,
};

/// The store's price row for an instance type. The store keeps one committed price per hour: the
/// one-year commitment, per month divided by [`HOURS_PER_MONTH`]. `accelerator_count` is the leading
/// `Nx` of the accelerator text (1 when absent). `None` when the price date is not `YYYY-MM-DD`.
pub fn catalog_price_row(instance: &InstanceType) -> Option<NewCatalogPrice> {
    let price_date = NaiveDate::parse_from_str(&instance.price_date, "%Y-%m-%d").ok()?;
    let accelerator = instance
        .accelerator
        .clone()
        .filter(|a| !a.trim().is_empty());
    let accelerator_count = accelerator.as_deref().map_or(0, |a| {
        a.split_once('x')
            .and_then(|(n, _)| n.trim().parse().ok())
            .unwrap_or(1)
    });
    Some(NewCatalogPrice {
        provider: instance.provider.clone(),
        region: instance.region.clone(),
        instance_type: instance.name.clone(),
        vcpus: i64::from(instance.vcpus),
        memory_gib: instance.memory_gib,
        accelerator,
        accelerator_count,
        on_demand_usd_per_hour: instance.on_demand_per_hour,
        spot_usd_per_hour: instance.spot_per_hour,
        committed_usd_per_hour: instance.committed_1y_per_month.map(|m| m / HOURS_PER_MONTH),
        watts: Some(instance.power_watts),
        source: instance.source.clone(),
        price_date,
    })
}

/// The planner's instance type for a stored price row, the inverse of [`catalog_price_row`]: the
/// stored committed price per hour is the one-year commitment (per month again), the three-year one is
/// not stored, and neither is the instance's memory bandwidth.
pub fn instance_type_of(row: &CatalogPriceRow) -> InstanceType {
    InstanceType {
        provider: row.provider.clone(),
        region: row.region.clone(),
        name: row.instance_type.clone(),
        vcpus: u32::try_from(row.vcpus).unwrap_or(0),
        memory_gib: row.memory_gib,
        accelerator: row.accelerator.clone(),
        on_demand_per_hour: row.on_demand_usd_per_hour,
        spot_per_hour: row.spot_usd_per_hour,
        committed_1y_per_month: row.committed_usd_per_hour.map(|h| h * HOURS_PER_MONTH),
        committed_3y_per_month: None,
        power_watts: row.watts.unwrap_or(0.0),
        source: row.source.clone(),
        price_date: row.price_date.format("%Y-%m-%d").to_string(),
        mem_bandwidth_gbs: None,
    }
}

/// The catalog of the store's prices: the latest price of each provider, region and instance type
/// (the store lists them latest date first), in the store's order.
pub fn catalog_of_prices(rows: &[CatalogPriceRow]) -> Catalog {
    let mut catalog = Catalog::default();
    for row in rows {
        let seen = catalog.instances.iter().any(|i| {
            i.provider == row.provider && i.region == row.region && i.name == row.instance_type
        });
        if !seen {
            catalog.instances.push(instance_type_of(row));
        }
    }
    catalog
}

/// Records the builtin catalog's prices (with their sources and dates) unless they are already
/// recorded: what a store holds on first use, so that the dashboard can cost configs with no extra step.
///
/// # Errors
/// [`PlanningError::Store`].
pub async fn record_builtin_prices(store: &dyn Store) -> Result<PricesRecorded> {
    record_catalog_prices(store, &Catalog::builtin()).await
}

/// What [`record_catalog_prices`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PricesRecorded {
    /// New rows.
    pub inserted: usize,
    /// Instance types whose price for that date was already recorded (left as they were).
    pub already_recorded: usize,
    /// Instance types skipped because their price date is not `YYYY-MM-DD`.
    pub undated: usize,
}

/// Records the catalog's instance prices; a price already recorded for the same provider, region, type
/// and date is left as it is. Per-token endpoints have no table in the store and are not recorded.
///
/// # Errors
/// [`PlanningError::Store`] for anything but that duplicate.
pub async fn record_catalog_prices(store: &dyn Store, catalog: &Catalog) -> Result<PricesRecorded> {
    let mut done = PricesRecorded::default();
    let recorded = store.list_catalog_prices(None).await?;
    for instance in &catalog.instances {
        let Some(row) = catalog_price_row(instance) else {
            done.undated += 1;
            continue;
        };
        let known = recorded.iter().any(|r| {
            r.provider == row.provider
                && r.region == row.region
                && r.instance_type == row.instance_type
                && r.price_date == row.price_date
        });
        if known {
            done.already_recorded += 1;
            continue;
        }
        match store.insert_catalog_price(&row).await {
            Ok(_) => done.inserted += 1,
            Err(e) if e.is_conflict_on(constraint::CATALOG_PRICES_INSTANCE_DATE) => {
                done.already_recorded += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// Output tokens a plan serves in its day: per hour and class, requests not shed x the class's mean
/// output length.
pub fn plan_output_tokens(plan: &Plan, workload: &Workload) -> i64 {
    let mut tokens = 0.0;
    for hour in &plan.hours {
        for class in &hour.classes {
            let Some(spec) = workload.classes.iter().find(|c| c.name == class.class) else {
                continue;
            };
            tokens += class.rps * 3600.0 * (1.0 - class.shed_share) * spec.output_tokens.mean();
        }
    }
    // Saturating float-to-int conversion; a day's tokens are far below i64::MAX.
    tokens.round() as i64
}

/// Records a plan under its workload: the workload row with the workload's name is reused (with a
/// warning when its spec differs), or recorded (spec = the validated workload as JSON); the plan row holds the plan as JSON, its cost per day and
/// [`plan_output_tokens`].
///
/// # Errors
/// [`PlanningError::Store`], [`PlanningError::Json`].
pub async fn record_plan(
    store: &dyn Store,
    workload: &Workload,
    plan: &Plan,
) -> Result<(WorkloadRow, PlanRow)> {
    let json = |what, value: Result<Value, serde_json::Error>| {
        value.map_err(|source| PlanningError::Json { what, source })
    };
    let workload_row = ensure_workload(store, workload).await?;
    let new = NewPlan {
        workload_id: workload_row.id,
        plan: json("plan", serde_json::to_value(plan))?,
        total_cost_usd: plan.totals.cost_per_day,
        total_output_tokens: plan_output_tokens(plan, workload),
    };
    let plan_row = store.insert_plan(&new).await?;
    Ok((workload_row, plan_row))
}

/// The workload's row: the one of its name (with a warning when its spec differs), or a new one whose
/// spec is the validated workload as JSON.
///
/// # Errors
/// [`PlanningError::Store`], [`PlanningError::Json`].
pub async fn ensure_workload(store: &dyn Store, workload: &Workload) -> Result<WorkloadRow> {
    let spec = serde_json::to_value(workload).map_err(|source| PlanningError::Json {
        what: "workload",
        source,
    })?;
    let workload_row = match store.find_workload_by_name(&workload.name).await? {
        Some(row) => {
            if row.spec != spec {
                tracing::warn!(
                    workload = %row.name,
                    id = %row.id,
                    "the stored workload of this name differs from the file; the plan is recorded under \
                     the stored one (rename the workload to keep both)"
                );
            }
            row
        }
        None => {
            let new = NewWorkload {
                name: workload.name.clone(),
                spec,
            };
            match store.insert_workload(&new).await {
                Ok(row) => row,
                // Recorded meanwhile by another process.
                Err(e) if e.is_conflict_on(constraint::WORKLOADS_NAME) => store
                    .find_workload_by_name(&workload.name)
                    .await?
                    .ok_or(e)?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    Ok(workload_row)
}
