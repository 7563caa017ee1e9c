//! `strata plan`: read a workload, a price catalog and measured profiles, make the hour-by-hour capacity
//! plan, print it, and record it (with its workload and the prices used) in the store.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use strata_controller::planning;
use strata_planner::{
    catalog::{Catalog, PriceModel},
    pilot::PilotSpec,
    plan::{PlanInput, plan},
    profile::ConfigProfile,
    workload::{Workload, WorkloadFile},
};

use super::{GlobalArgs, store};

/// Arguments of `strata plan`.
#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The workload: classes, SLAs, arrivals, budget and GPU fallback (TOML).
    #[arg(long, value_name = "FILE")]
    workload: PathBuf,
    /// Prices merged over the builtin catalog (TOML) [default: the builtin catalog alone].
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// Config profiles (JSON array, or TOML with `[[profile]]`) [default: the store's measured runs].
    #[arg(long, value_name = "FILE")]
    profiles: Option<PathBuf>,
    /// Only the stored runs of this model (without `--profiles`).
    #[arg(long, value_name = "NAME", conflicts_with = "profiles")]
    model: Option<String>,
    /// A request trace (CSV) instead of the workload's hourly rates or its `trace_file`.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// How CPU instances are paid for.
    #[arg(
        long,
        default_value = "on-demand",
        value_name = "on-demand|spot|committed-1y|committed-3y"
    )]
    price_model: PriceModel,
    /// Share of SLA-feasible capacity kept free, 0 to 1.
    #[arg(long, default_value_t = 0.2, value_name = "F")]
    headroom: f64,
    /// Seed of the simulation that replays the plan.
    #[arg(long, default_value_t = 1, value_name = "N")]
    seed: u64,
    /// Let estimated profiles compete with measured ones (they stay labelled as estimates).
    #[arg(long)]
    allow_estimates: bool,
    /// Print the plan as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

impl PlanArgs {
    /// Runs the command.
    pub(crate) fn run(self, global: &GlobalArgs) -> anyhow::Result<()> {
        super::runtime(super::Workers::CallerOnly)?.block_on(self.run_async(global))
    }

    async fn run_async(self, global: &GlobalArgs) -> anyhow::Result<()> {
        let (workload, _) = read_workload(&self.workload, self.trace.as_deref())?;
        let catalog = read_catalog(self.catalog.as_deref())?;
        let (_, db) = store::open(global).await?;
        let profiles = match &self.profiles {
            Some(path) => read_profiles(path)?,
            None => {
                let profiles = planning::profiles_from_store(&*db, self.model.as_deref())
                    .await
                    .context("reading measured profiles from the store")?;
                if profiles.is_empty() {
                    bail!(
                        "the store holds no measured runs{}: run `strata profile` first, or pass \
                         `--profiles FILE` (planner/examples/profiles.json holds illustrative curves, \
                         labelled as estimates: use it with --allow-estimates)",
                        self.model
                            .as_deref()
                            .map(|m| format!(" of model {m}"))
                            .unwrap_or_default()
                    );
                }
                tracing::info!(
                    count = profiles.len(),
                    "profiles from the store's measured runs"
                );
                profiles
            }
        };

        let mut input = PlanInput::new(workload, catalog, profiles)
            .with_context(|| format!("{}: cannot plan", self.workload.display()))?;
        input.price_model = self.price_model;
        input.headroom = self.headroom;
        input.seed = self.seed;
        input.allow_estimates = self.allow_estimates;
        let plan =
            plan(&input).with_context(|| format!("planning workload {}", input.workload.name))?;

        if self.json {
            println!("{}", serde_json::to_string_pretty(&plan)?);
        } else {
            print!("{}", plan.render_table());
        }

        let prices = planning::record_catalog_prices(&*db, &input.catalog)
            .await
            .context("recording the catalog prices")?;
        let (workload_row, plan_row) = planning::record_plan(&*db, &input.workload, &plan)
            .await
            .context("recording the plan")?;
        tracing::info!(
            workload = %workload_row.name,
            workload_id = %workload_row.id,
            plan_id = %plan_row.id,
            prices_recorded = prices.inserted,
            prices_already_recorded = prices.already_recorded,
            "plan recorded in the store"
        );
        db.close().await;
        Ok(())
    }
}

/// The workload of a file (with the trace it names, or `trace` instead) and its `[pilot]` table.
pub(crate) fn read_workload(
    path: &Path,
    trace: Option<&Path>,
) -> anyhow::Result<(Workload, Option<PilotSpec>)> {
    let workload_text = read(path, "workload")?;
    let workload_file = WorkloadFile::from_toml_str(&workload_text)
        .with_context(|| format!("{}: not a valid workload", path.display()))?;
    let pilot = workload_file.pilot.clone();
    let trace_path = trace.map(Path::to_path_buf).or_else(|| {
        workload_file
            .trace_file()
            .map(|file| relative_to(path, file))
    });
    let trace = trace_path
        .as_deref()
        .map(|trace| read(trace, "trace"))
        .transpose()?;
    let workload =
        workload_file
            .into_workload(trace.as_deref())
            .with_context(|| match &trace_path {
                Some(trace) => format!(
                    "{} (trace {}): not a valid workload",
                    path.display(),
                    trace.display()
                ),
                None => format!("{}: not a valid workload", path.display()),
            })?;
    Ok((workload, pilot))
}

/// The builtin catalog with the user's catalog file (if any) merged over it.
pub(crate) fn read_catalog(path: Option<&Path>) -> anyhow::Result<Catalog> {
    let mut catalog = Catalog::builtin();
    if let Some(path) = path {
        let user = Catalog::from_toml_str(&read(path, "catalog")?)
            .with_context(|| format!("{}: not a valid catalog", path.display()))?;
        catalog.merge(user);
    }
    Ok(catalog)
}

/// The text of an input file, with an error naming it.
fn read(path: &Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {what} file {}", path.display()))
}

/// Profiles from a JSON array, or from TOML `[[profile]]` tables when the file name ends in `.toml`.
fn read_profiles(path: &Path) -> anyhow::Result<Vec<ConfigProfile>> {
    let text = read(path, "profiles")?;
    let parsed = if path.extension().is_some_and(|e| e == "toml") {
        ConfigProfile::list_from_toml_str(&text)
    } else {
        ConfigProfile::list_from_json_str(&text)
    };
    parsed.with_context(|| format!("{}: not valid profiles", path.display()))
}

/// `file` as written in `workload`: relative paths are taken from the workload file's folder.
fn relative_to(workload: &Path, file: &str) -> PathBuf {
    let file = Path::new(file);
    match workload.parent() {
        Some(dir) if file.is_relative() => dir.join(file),
        _ => file.to_path_buf(),
    }
}
