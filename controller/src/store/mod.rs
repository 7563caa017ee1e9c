//! The store: everything Strata records, behind one [`Store`] trait with a PostgreSQL and a SQLite
//! implementation.
//!
//! PostgreSQL is the production store that several controllers and gateways share; SQLite is the embedded
//! default, a file in the user's data folder. [`open`] picks the backend from the URL's scheme and applies
//! the migrations (`migrations/postgres/`, `migrations/sqlite/`) before handing the store out.
//!
//! This module owns all of Strata's SQL. Queries are checked at run time (`query_as` with
//! `#[derive(FromRow)]` rows), so building needs no database.
//!
//! ```no_run
//! # async fn example() -> strata_controller::store::Result<()> {
//! use strata_controller::store;
//!
//! let url = store::default_database_url()?;
//! let store = store::open(&url).await?;
//! let models = store.list_models().await?;
//! # Ok(()) }
//! ```

pub mod constraint;
mod error;
mod postgres;
mod rows;
mod schema;
mod shared;
mod sqlite;
mod summary_query;
#[doc(hidden)]
pub mod testing;

use std::{fmt, path::Path, sync::Arc};

use async_trait::async_trait;
use serde_json::Value;

pub use self::{
    error::{Result, StoreError},
    postgres::PgStore,
    rows::*,
    schema::pending_migrations,
    sqlite::SqliteStore,
};

/// The environment variable that holds the database URL.
pub const ENV_DATABASE_URL: &str = "STRATA_DATABASE_URL";

/// Which database a store keeps its data in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// PostgreSQL, for `postgres://` and `postgresql://` URLs.
    Postgres,
    /// SQLite, for `sqlite:` URLs.
    Sqlite,
}

impl Backend {
    /// The backend a database URL names.
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
        match scheme {
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "sqlite" => Ok(Self::Sqlite),
            _ => Err(StoreError::UnsupportedUrl {
                scheme: scheme.to_owned(),
            }),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Postgres => "PostgreSQL",
            Self::Sqlite => "SQLite",
        })
    }
}

/// Opens the store at `url` (`postgres://...`, `postgresql://...` or `sqlite:...`) and brings its schema
/// up to date. A SQLite file that does not exist yet is created.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    let backend = Backend::from_url(url)?;
    let store: Arc<dyn Store> = match backend {
        Backend::Postgres => Arc::new(PgStore::connect(url).await?),
        Backend::Sqlite => Arc::new(SqliteStore::connect(url).await?),
    };
    tracing::info!(%backend, "store open, schema up to date");
    Ok(store)
}

/// The URL of the embedded default store, `strata/strata.db` in the user's data folder, creating the
/// folder if needed.
pub fn default_database_url() -> Result<String> {
    let dir = dirs::data_dir()
        .ok_or(StoreError::NoDataDir)?
        .join("strata");
    std::fs::create_dir_all(&dir).map_err(|source| StoreError::CreateDir {
        path: dir.clone(),
        source,
    })?;
    Ok(sqlite_url(&dir.join("strata.db")))
}

/// The `sqlite:` URL of the database file at `path`, escaped so that any file name survives.
pub fn sqlite_url(path: &Path) -> String {
    let mut url = String::from("sqlite://");
    for &byte in path.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_alphanumeric() || b"/\\-_.~:".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

/// Everything Strata records, on either backend.
///
/// Inserts return the stored row, with its id and the timestamps the store set. `get_*` methods fail with
/// [`StoreError::NotFound`]; `find_*` and `latest_*` methods return `None` instead. Writes that would
/// duplicate a unique row fail with [`StoreError::Conflict`] naming one of the [`constraint`]s. Lists of
/// results come newest first.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Which database this store uses.
    fn backend(&self) -> Backend;

    /// Closes the store's connections, waiting for the ones in use.
    async fn close(&self);

    /// Records a CPU host.
    async fn insert_hardware(&self, new: &NewHardware) -> Result<HardwareRow>;
    /// The host with this id.
    async fn get_hardware(&self, id: HardwareId) -> Result<HardwareRow>;
    /// The host with this fingerprint hash, if recorded.
    async fn find_hardware_by_fingerprint(
        &self,
        fingerprint_hash: &str,
    ) -> Result<Option<HardwareRow>>;
    /// Every recorded host, oldest first.
    async fn list_hardware(&self) -> Result<Vec<HardwareRow>>;

    /// Records a model file.
    async fn insert_model(&self, new: &NewModel) -> Result<ModelRow>;
    /// The model with this id.
    async fn get_model(&self, id: ModelId) -> Result<ModelRow>;
    /// The model with this content hash, if recorded.
    async fn find_model_by_sha256(&self, sha256: &str) -> Result<Option<ModelRow>>;
    /// The model with this name, if recorded.
    async fn find_model_by_name(&self, name: &str) -> Result<Option<ModelRow>>;
    /// Every recorded model, by name.
    async fn list_models(&self) -> Result<Vec<ModelRow>>;

    /// Records a config.
    async fn insert_config(&self, new: &NewConfig) -> Result<ConfigRow>;
    /// The config with this id.
    async fn get_config(&self, id: ConfigId) -> Result<ConfigRow>;
    /// The recorded config with exactly these settings, if any.
    async fn find_config(&self, config: &NewConfig) -> Result<Option<ConfigRow>>;
    /// The configs of a model, oldest first.
    async fn list_configs_for_model(&self, model_id: ModelId) -> Result<Vec<ConfigRow>>;

    /// Records a profiling run.
    async fn insert_profile_run(&self, new: &NewProfileRun) -> Result<ProfileRunRow>;
    /// The run with this id.
    async fn get_profile_run(&self, id: ProfileRunId) -> Result<ProfileRunRow>;
    /// The runs of a config, latest start first.
    async fn list_profile_runs_for_config(&self, config_id: ConfigId)
    -> Result<Vec<ProfileRunRow>>;

    /// The latest run of every config on every host it ran on, with its model, host, latest capacity
    /// and quality results, filtered, sorted and cut as `query` says.
    async fn list_config_summaries(
        &self,
        query: &ConfigSummaryQuery,
    ) -> Result<Vec<ConfigSummaryRow>>;

    /// Records a capacity result.
    async fn insert_capacity_result(&self, new: &NewCapacityResult) -> Result<CapacityResultRow>;
    /// The capacity results of a config, newest first.
    async fn list_capacity_results_for_config(
        &self,
        config_id: ConfigId,
    ) -> Result<Vec<CapacityResultRow>>;

    /// Records a quality result.
    async fn insert_quality_result(&self, new: &NewQualityResult) -> Result<QualityResultRow>;
    /// The quality results of a config, newest first.
    async fn list_quality_results_for_config(
        &self,
        config_id: ConfigId,
    ) -> Result<Vec<QualityResultRow>>;

    /// Records a price.
    async fn insert_catalog_price(&self, new: &NewCatalogPrice) -> Result<CatalogPriceRow>;
    /// Prices of one provider, or of all, by provider, region and instance type, latest date first.
    async fn list_catalog_prices(&self, provider: Option<&str>) -> Result<Vec<CatalogPriceRow>>;
    /// The most recent price of an instance type, if any.
    async fn latest_catalog_price(
        &self,
        provider: &str,
        region: &str,
        instance_type: &str,
    ) -> Result<Option<CatalogPriceRow>>;

    /// Records a workload.
    async fn insert_workload(&self, new: &NewWorkload) -> Result<WorkloadRow>;
    /// The workload with this id.
    async fn get_workload(&self, id: WorkloadId) -> Result<WorkloadRow>;
    /// The workload with this name, if recorded.
    async fn find_workload_by_name(&self, name: &str) -> Result<Option<WorkloadRow>>;
    /// Every workload, by name.
    async fn list_workloads(&self) -> Result<Vec<WorkloadRow>>;

    /// Records a plan, stamped now.
    async fn insert_plan(&self, new: &NewPlan) -> Result<PlanRow>;
    /// The most recent plan for a workload, if any.
    async fn latest_plan_for_workload(&self, workload_id: WorkloadId) -> Result<Option<PlanRow>>;
    /// The plans for a workload, newest first.
    async fn list_plans_for_workload(&self, workload_id: WorkloadId) -> Result<Vec<PlanRow>>;

    /// Records a new pilot evaluation of a workload, pending.
    async fn insert_pilot(&self, workload_id: WorkloadId) -> Result<PilotRow>;
    /// The pilot with this id.
    async fn get_pilot(&self, id: PilotId) -> Result<PilotRow>;
    /// Sets a pilot's status, verdict and report.
    async fn update_pilot(&self, id: PilotId, update: &PilotUpdate) -> Result<PilotRow>;
    /// The pilots of a workload, newest first.
    async fn list_pilots_for_workload(&self, workload_id: WorkloadId) -> Result<Vec<PilotRow>>;

    /// Records a gateway decision.
    async fn insert_gateway_decision(&self, new: &NewGatewayDecision)
    -> Result<GatewayDecisionRow>;
    /// At most `limit` decisions taken within `window`, newest first.
    async fn list_gateway_decisions(
        &self,
        window: TimeWindow,
        limit: i64,
    ) -> Result<Vec<GatewayDecisionRow>>;

    /// Records spending in the budget ledger.
    async fn insert_ledger_entry(&self, new: &NewLedgerEntry) -> Result<LedgerEntryRow>;
    /// The ledger entries within `window`, oldest first.
    async fn list_ledger_entries(&self, window: TimeWindow) -> Result<Vec<LedgerEntryRow>>;
    /// The money and tokens spent within `window`, by one pool or by all.
    async fn ledger_total(&self, window: TimeWindow, pool: Option<&str>) -> Result<LedgerTotal>;

    /// Queues a profiling job.
    async fn enqueue_profile_job(&self, spec: &Value) -> Result<ProfileJobRow>;
    /// Claims the oldest queued job for `worker`, marking it running, or returns `None` when none is
    /// queued. Concurrent claimers, in this process or others sharing the database, never get the same job.
    async fn claim_next_profile_job(&self, worker: &str) -> Result<Option<ProfileJobRow>>;
    /// Like [`Store::claim_next_profile_job`], and also takes over a running job whose claim is older
    /// than `lease` (its worker died or stopped renewing): the oldest such or queued job first.
    async fn claim_next_profile_job_leased(
        &self,
        worker: &str,
        lease: std::time::Duration,
    ) -> Result<Option<ProfileJobRow>>;
    /// Renews `worker`'s claim on running job `id`; `false` when the job is no longer `worker`'s or
    /// no longer running (another worker took it over after the lease expired).
    async fn renew_profile_job_lease(&self, id: ProfileJobId, worker: &str) -> Result<bool>;
    /// Marks a running job done or failed; [`StoreError::JobNotRunning`] if it is not running.
    async fn complete_profile_job(
        &self,
        id: ProfileJobId,
        outcome: &JobOutcome,
    ) -> Result<ProfileJobRow>;
    /// The job with this id.
    async fn get_profile_job(&self, id: ProfileJobId) -> Result<ProfileJobRow>;
    /// The jobs with a status, or all, oldest first.
    async fn list_profile_jobs(&self, status: Option<JobStatus>) -> Result<Vec<ProfileJobRow>>;

    /// Records an endpoint.
    async fn insert_endpoint(&self, new: &NewEndpoint) -> Result<EndpointRow>;
    /// The endpoint with this base URL and served model name, if recorded.
    async fn find_endpoint(&self, new: &NewEndpoint) -> Result<Option<EndpointRow>>;
    /// Every endpoint, by base URL and model name.
    async fn list_endpoints(&self) -> Result<Vec<EndpointRow>>;
    /// Records one measured run against an endpoint.
    async fn insert_endpoint_run(&self, new: &NewEndpointRun) -> Result<EndpointRunRow>;
    /// An endpoint's runs, newest first.
    async fn list_endpoint_runs(&self, endpoint_id: EndpointId) -> Result<Vec<EndpointRunRow>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_schemes_pick_the_backend() {
        assert_eq!(
            Backend::from_url("postgres://u@h/db").unwrap(),
            Backend::Postgres
        );
        assert_eq!(
            Backend::from_url("postgresql://h/db").unwrap(),
            Backend::Postgres
        );
        assert_eq!(
            Backend::from_url("sqlite::memory:").unwrap(),
            Backend::Sqlite
        );
        assert_eq!(
            Backend::from_url("sqlite:///tmp/s.db").unwrap(),
            Backend::Sqlite
        );
        let err = Backend::from_url("mysql://root:secret@h/db").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unsupported database URL scheme \"mysql\": expected postgres://, postgresql:// or sqlite:"
        );
        assert!(matches!(
            Backend::from_url("strata.db"),
            Err(StoreError::UnsupportedUrl { .. })
        ));
    }

    #[test]
    fn sqlite_urls_escape_awkward_file_names() {
        let url = sqlite_url(Path::new("/home/a b/Application Support/x?#%.db"));
        assert_eq!(
            url,
            "sqlite:///home/a%20b/Application%20Support/x%3F%23%25.db"
        );
        let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
        assert_eq!(
            options.get_filename(),
            Path::new("/home/a b/Application Support/x?#%.db")
        );
    }
}
