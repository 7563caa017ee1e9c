//! The queries both backends run with the same SQL, written once.
//!
//! Both dialects accept `$n` parameters, `RETURNING` and the casts used here, so [`impl_store!`] stamps one
//! `Store` implementation per backend from a single text. What differs (connecting, claiming jobs) lives
//! in each backend's own file as an inherent `claim_next` method that the stamped code calls.
//!
//! Timestamps are cut to whole microseconds before they are written, the precision PostgreSQL keeps,
//! so that both backends return exactly what they were given.

use chrono::{DateTime, SubsecRound, Utc};

/// A timestamp as the store keeps it.
pub(super) fn stored(at: DateTime<Utc>) -> DateTime<Utc> {
    at.trunc_subsecs(6)
}

/// The current time as the store keeps it.
pub(super) fn now() -> DateTime<Utc> {
    stored(Utc::now())
}

/// Implements `Store` for `$store`, whose `pool` field is a `sqlx::Pool<$db>` and which has an inherent
/// `async fn claim_next(&self, worker: &str, at: DateTime<Utc>, expired_before: Option<DateTime<Utc>>)`
/// (with `expired_before`, running jobs claimed before it are taken over too).
macro_rules! impl_store {
    ($store:ty, $db:ty) => {
        const _: () = {
            use serde_json::Value;
            use sqlx::{query_as, types::Json};

            use $crate::store::{
                Backend, Result, Store, StoreError,
                rows::*,
                shared::{now, stored},
            };

            type Db = $db;

            #[async_trait::async_trait]
            impl Store for $store {
                fn backend(&self) -> Backend {
                    Self::BACKEND
                }

                async fn close(&self) {
                    self.pool.close().await;
                }

                async fn insert_hardware(&self, new: &NewHardware) -> Result<HardwareRow> {
                    let row = query_as::<Db, HardwareRow>(
                        "INSERT INTO hardware (fingerprint_hash, cpu_model, cores, threads, isa_flags, \
                         l1d_cache_bytes, l2_cache_bytes, l3_cache_bytes, numa_nodes, memory_bytes, \
                         bandwidth_gb_per_s, peak_int8_gops, peak_f32_gops, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING *",
                    )
                    .bind(&new.fingerprint_hash)
                    .bind(&new.cpu_model)
                    .bind(new.cores)
                    .bind(new.threads)
                    .bind(Json(&new.isa_flags))
                    .bind(new.l1d_cache_bytes)
                    .bind(new.l2_cache_bytes)
                    .bind(new.l3_cache_bytes)
                    .bind(new.numa_nodes)
                    .bind(new.memory_bytes)
                    .bind(new.bandwidth_gb_per_s)
                    .bind(new.peak_int8_gops)
                    .bind(new.peak_f32_gops)
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn get_hardware(&self, id: HardwareId) -> Result<HardwareRow> {
                    query_as::<Db, HardwareRow>("SELECT * FROM hardware WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                        .ok_or_else(|| StoreError::not_found("hardware", id))
                }

                async fn find_hardware_by_fingerprint(
                    &self,
                    fingerprint_hash: &str,
                ) -> Result<Option<HardwareRow>> {
                    let row = query_as::<Db, HardwareRow>(
                        "SELECT * FROM hardware WHERE fingerprint_hash = $1",
                    )
                    .bind(fingerprint_hash)
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_hardware(&self) -> Result<Vec<HardwareRow>> {
                    let rows = query_as::<Db, HardwareRow>("SELECT * FROM hardware ORDER BY id")
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows)
                }

                async fn insert_model(&self, new: &NewModel) -> Result<ModelRow> {
                    let row = query_as::<Db, ModelRow>(
                        "INSERT INTO models (name, path, format, sha256, size_bytes, parameters, synthetic, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *",
                    )
                    .bind(&new.name)
                    .bind(&new.path)
                    .bind(&new.format)
                    .bind(&new.sha256)
                    .bind(new.size_bytes)
                    .bind(new.parameters)
                    .bind(new.synthetic)
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn get_model(&self, id: ModelId) -> Result<ModelRow> {
                    query_as::<Db, ModelRow>("SELECT * FROM models WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                        .ok_or_else(|| StoreError::not_found("model", id))
                }

                async fn find_model_by_sha256(&self, sha256: &str) -> Result<Option<ModelRow>> {
                    let row = query_as::<Db, ModelRow>("SELECT * FROM models WHERE sha256 = $1")
                        .bind(sha256)
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(row)
                }

                async fn find_model_by_name(&self, name: &str) -> Result<Option<ModelRow>> {
                    let row = query_as::<Db, ModelRow>("SELECT * FROM models WHERE name = $1")
                        .bind(name)
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(row)
                }

                async fn list_models(&self) -> Result<Vec<ModelRow>> {
                    let rows = query_as::<Db, ModelRow>("SELECT * FROM models ORDER BY name")
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows)
                }

                async fn insert_config(&self, new: &NewConfig) -> Result<ConfigRow> {
                    let row = query_as::<Db, ConfigRow>(
                        "INSERT INTO configs (model_id, weight_type, threads, max_batch, numa_policy, \
                         kv_memory_mib, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *",
                    )
                    .bind(new.model_id)
                    .bind(&new.weight_type)
                    .bind(new.threads)
                    .bind(new.max_batch)
                    .bind(&new.numa_policy)
                    .bind(new.kv_memory_mib)
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn get_config(&self, id: ConfigId) -> Result<ConfigRow> {
                    query_as::<Db, ConfigRow>("SELECT * FROM configs WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                        .ok_or_else(|| StoreError::not_found("config", id))
                }

                async fn find_config(&self, config: &NewConfig) -> Result<Option<ConfigRow>> {
                    let row = query_as::<Db, ConfigRow>(
                        "SELECT * FROM configs WHERE model_id = $1 AND weight_type = $2 AND threads = $3 \
                         AND max_batch = $4 AND numa_policy = $5 AND kv_memory_mib = $6",
                    )
                    .bind(config.model_id)
                    .bind(&config.weight_type)
                    .bind(config.threads)
                    .bind(config.max_batch)
                    .bind(&config.numa_policy)
                    .bind(config.kv_memory_mib)
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_configs_for_model(
                    &self,
                    model_id: ModelId,
                ) -> Result<Vec<ConfigRow>> {
                    let rows = query_as::<Db, ConfigRow>(
                        "SELECT * FROM configs WHERE model_id = $1 ORDER BY id",
                    )
                    .bind(model_id)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn insert_profile_run(&self, new: &NewProfileRun) -> Result<ProfileRunRow> {
                    let row = query_as::<Db, ProfileRunRow>(
                        "INSERT INTO profile_runs (config_id, hardware_id, started_at, finished_at, \
                         workload_shape, request_count, error_count, \
                         ttft_p50_ms, ttft_p90_ms, ttft_p95_ms, ttft_p99_ms, \
                         tpot_p50_ms, tpot_p90_ms, tpot_p95_ms, tpot_p99_ms, \
                         itl_p50_ms, itl_p90_ms, itl_p95_ms, itl_p99_ms, \
                         e2e_p50_ms, e2e_p90_ms, e2e_p95_ms, e2e_p99_ms, \
                         output_tokens_per_s, total_tokens_per_s, requests_per_s, goodput_requests_per_s, \
                         sla_attainment, peak_rss_bytes, cpu_utilization, kernel_tier, placement, \
                         engine_version) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                         $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, \
                         $33) RETURNING *",
                    )
                    .bind(new.config_id)
                    .bind(new.hardware_id)
                    .bind(stored(new.started_at))
                    .bind(stored(new.finished_at))
                    .bind(Json(&new.workload_shape))
                    .bind(new.request_count)
                    .bind(new.error_count)
                    .bind(new.ttft_p50_ms)
                    .bind(new.ttft_p90_ms)
                    .bind(new.ttft_p95_ms)
                    .bind(new.ttft_p99_ms)
                    .bind(new.tpot_p50_ms)
                    .bind(new.tpot_p90_ms)
                    .bind(new.tpot_p95_ms)
                    .bind(new.tpot_p99_ms)
                    .bind(new.itl_p50_ms)
                    .bind(new.itl_p90_ms)
                    .bind(new.itl_p95_ms)
                    .bind(new.itl_p99_ms)
                    .bind(new.e2e_p50_ms)
                    .bind(new.e2e_p90_ms)
                    .bind(new.e2e_p95_ms)
                    .bind(new.e2e_p99_ms)
                    .bind(new.output_tokens_per_s)
                    .bind(new.total_tokens_per_s)
                    .bind(new.requests_per_s)
                    .bind(new.goodput_requests_per_s)
                    .bind(new.sla_attainment)
                    .bind(new.peak_rss_bytes)
                    .bind(new.cpu_utilization)
                    .bind(&new.kernel_tier)
                    .bind(&new.placement)
                    .bind(&new.engine_version)
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn get_profile_run(&self, id: ProfileRunId) -> Result<ProfileRunRow> {
                    query_as::<Db, ProfileRunRow>("SELECT * FROM profile_runs WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                        .ok_or_else(|| StoreError::not_found("profile run", id))
                }

                async fn list_profile_runs_for_config(
                    &self,
                    config_id: ConfigId,
                ) -> Result<Vec<ProfileRunRow>> {
                    let rows = query_as::<Db, ProfileRunRow>(
                        "SELECT * FROM profile_runs WHERE config_id = $1 ORDER BY started_at DESC, id DESC",
                    )
                    .bind(config_id)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn list_config_summaries(
                    &self,
                    query: &ConfigSummaryQuery,
                ) -> Result<Vec<ConfigSummaryRow>> {
                    let sql = format!(
                        "{} ORDER BY {} LIMIT $7",
                        $crate::store::summary_query::CONFIG_SUMMARIES,
                        $crate::store::summary_query::order_by(query.sort, query.descending),
                    );
                    let rows = query_as::<Db, ConfigSummaryRow>(sqlx::AssertSqlSafe(sql))
                        .bind(query.model.as_deref())
                        .bind(query.weight_type.as_deref())
                        .bind(query.hardware_id)
                        .bind(query.threads)
                        .bind(query.max_batch)
                        .bind(query.numa_policy.as_deref())
                        .bind(query.limit.unwrap_or(i64::MAX))
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows)
                }

                async fn insert_capacity_result(
                    &self,
                    new: &NewCapacityResult,
                ) -> Result<CapacityResultRow> {
                    let row = query_as::<Db, CapacityResultRow>(
                        "INSERT INTO capacity_results (config_id, hardware_id, run_id, sla_ttft_p99_ms, \
                         sla_tpot_p99_ms, max_requests_per_s, load_curve, step_model, created_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING *",
                    )
                    .bind(new.config_id)
                    .bind(new.hardware_id)
                    .bind(new.run_id)
                    .bind(new.sla_ttft_p99_ms)
                    .bind(new.sla_tpot_p99_ms)
                    .bind(new.max_requests_per_s)
                    .bind(Json(&new.load_curve))
                    .bind(new.step_model.as_ref().map(Json))
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_capacity_results_for_config(
                    &self,
                    config_id: ConfigId,
                ) -> Result<Vec<CapacityResultRow>> {
                    let rows = query_as::<Db, CapacityResultRow>(
                        "SELECT * FROM capacity_results WHERE config_id = $1 \
                         ORDER BY created_at DESC, id DESC",
                    )
                    .bind(config_id)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn insert_quality_result(
                    &self,
                    new: &NewQualityResult,
                ) -> Result<QualityResultRow> {
                    let row = query_as::<Db, QualityResultRow>(
                        "INSERT INTO quality_results (config_id, text_id, perplexity, top1_agreement, \
                         created_at) VALUES ($1, $2, $3, $4, $5) RETURNING *",
                    )
                    .bind(new.config_id)
                    .bind(&new.text_id)
                    .bind(new.perplexity)
                    .bind(new.top1_agreement)
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_quality_results_for_config(
                    &self,
                    config_id: ConfigId,
                ) -> Result<Vec<QualityResultRow>> {
                    let rows = query_as::<Db, QualityResultRow>(
                        "SELECT * FROM quality_results WHERE config_id = $1 \
                         ORDER BY created_at DESC, id DESC",
                    )
                    .bind(config_id)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn insert_catalog_price(
                    &self,
                    new: &NewCatalogPrice,
                ) -> Result<CatalogPriceRow> {
                    let row = query_as::<Db, CatalogPriceRow>(
                        "INSERT INTO catalog_prices (provider, region, instance_type, vcpus, memory_gib, \
                         accelerator, accelerator_count, on_demand_usd_per_hour, spot_usd_per_hour, \
                         committed_usd_per_hour, watts, source, price_date) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING *",
                    )
                    .bind(&new.provider)
                    .bind(&new.region)
                    .bind(&new.instance_type)
                    .bind(new.vcpus)
                    .bind(new.memory_gib)
                    .bind(&new.accelerator)
                    .bind(new.accelerator_count)
                    .bind(new.on_demand_usd_per_hour)
                    .bind(new.spot_usd_per_hour)
                    .bind(new.committed_usd_per_hour)
                    .bind(new.watts)
                    .bind(&new.source)
                    .bind(new.price_date)
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_catalog_prices(
                    &self,
                    provider: Option<&str>,
                ) -> Result<Vec<CatalogPriceRow>> {
                    let rows = query_as::<Db, CatalogPriceRow>(
                        "SELECT * FROM catalog_prices WHERE ($1 IS NULL OR provider = $1) \
                         ORDER BY provider, region, instance_type, price_date DESC",
                    )
                    .bind(provider)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn latest_catalog_price(
                    &self,
                    provider: &str,
                    region: &str,
                    instance_type: &str,
                ) -> Result<Option<CatalogPriceRow>> {
                    let row = query_as::<Db, CatalogPriceRow>(
                        "SELECT * FROM catalog_prices WHERE provider = $1 AND region = $2 \
                         AND instance_type = $3 ORDER BY price_date DESC LIMIT 1",
                    )
                    .bind(provider)
                    .bind(region)
                    .bind(instance_type)
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn insert_workload(&self, new: &NewWorkload) -> Result<WorkloadRow> {
                    let row = query_as::<Db, WorkloadRow>(
                        "INSERT INTO workloads (name, spec, created_at) VALUES ($1, $2, $3) RETURNING *",
                    )
                    .bind(&new.name)
                    .bind(Json(&new.spec))
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn get_workload(&self, id: WorkloadId) -> Result<WorkloadRow> {
                    query_as::<Db, WorkloadRow>("SELECT * FROM workloads WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                        .ok_or_else(|| StoreError::not_found("workload", id))
                }

                async fn find_workload_by_name(&self, name: &str) -> Result<Option<WorkloadRow>> {
                    let row =
                        query_as::<Db, WorkloadRow>("SELECT * FROM workloads WHERE name = $1")
                            .bind(name)
                            .fetch_optional(&self.pool)
                            .await?;
                    Ok(row)
                }

                async fn list_workloads(&self) -> Result<Vec<WorkloadRow>> {
                    let rows = query_as::<Db, WorkloadRow>("SELECT * FROM workloads ORDER BY name")
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows)
                }

                async fn insert_plan(&self, new: &NewPlan) -> Result<PlanRow> {
                    let row = query_as::<Db, PlanRow>(
                        "INSERT INTO plans (workload_id, created_at, plan, total_cost_usd, \
                         total_output_tokens) VALUES ($1, $2, $3, $4, $5) RETURNING *",
                    )
                    .bind(new.workload_id)
                    .bind(now())
                    .bind(Json(&new.plan))
                    .bind(new.total_cost_usd)
                    .bind(new.total_output_tokens)
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn latest_plan_for_workload(
                    &self,
                    workload_id: WorkloadId,
                ) -> Result<Option<PlanRow>> {
                    let row = query_as::<Db, PlanRow>(
                        "SELECT * FROM plans WHERE workload_id = $1 \
                         ORDER BY created_at DESC, id DESC LIMIT 1",
                    )
                    .bind(workload_id)
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_plans_for_workload(
                    &self,
                    workload_id: WorkloadId,
                ) -> Result<Vec<PlanRow>> {
                    let rows = query_as::<Db, PlanRow>(
                        "SELECT * FROM plans WHERE workload_id = $1 ORDER BY created_at DESC, id DESC",
                    )
                    .bind(workload_id)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn insert_pilot(&self, workload_id: WorkloadId) -> Result<PilotRow> {
                    let row = query_as::<Db, PilotRow>(
                        "INSERT INTO pilots (workload_id, status, created_at, updated_at) \
                         VALUES ($1, $2, $3, $3) RETURNING *",
                    )
                    .bind(workload_id)
                    .bind(PilotStatus::Pending.as_str())
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn get_pilot(&self, id: PilotId) -> Result<PilotRow> {
                    query_as::<Db, PilotRow>("SELECT * FROM pilots WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                        .ok_or_else(|| StoreError::not_found("pilot", id))
                }

                async fn update_pilot(
                    &self,
                    id: PilotId,
                    update: &PilotUpdate,
                ) -> Result<PilotRow> {
                    query_as::<Db, PilotRow>(
                        "UPDATE pilots SET status = $2, verdict = $3, report = $4, updated_at = $5 \
                         WHERE id = $1 RETURNING *",
                    )
                    .bind(id)
                    .bind(update.status.as_str())
                    .bind(&update.verdict)
                    .bind(update.report.as_ref().map(Json::<&Value>))
                    .bind(now())
                    .fetch_optional(&self.pool)
                    .await?
                    .ok_or_else(|| StoreError::not_found("pilot", id))
                }

                async fn list_pilots_for_workload(
                    &self,
                    workload_id: WorkloadId,
                ) -> Result<Vec<PilotRow>> {
                    let rows = query_as::<Db, PilotRow>(
                        "SELECT * FROM pilots WHERE workload_id = $1 ORDER BY created_at DESC, id DESC",
                    )
                    .bind(workload_id)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn insert_gateway_decision(
                    &self,
                    new: &NewGatewayDecision,
                ) -> Result<GatewayDecisionRow> {
                    let row = query_as::<Db, GatewayDecisionRow>(
                        "INSERT INTO gateway_decisions (decided_at, request_id, sla_class, pool, endpoint, \
                         reason, predicted_latency_ms, observed_latency_ms, prompt_tokens, output_tokens, \
                         cost_usd, source, predicted_ttft_ms, observed_ttft_ms, raw_predicted_ttft_ms, \
                         raw_predicted_latency_ms, other_pools) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
                         $9, $10, $11, $12, $13, $14, $15, $16, $17) RETURNING *",
                    )
                    .bind(stored(new.decided_at))
                    .bind(&new.request_id)
                    .bind(&new.sla_class)
                    .bind(&new.pool)
                    .bind(&new.endpoint)
                    .bind(&new.reason)
                    .bind(new.predicted_latency_ms)
                    .bind(new.observed_latency_ms)
                    .bind(new.prompt_tokens)
                    .bind(new.output_tokens)
                    .bind(new.cost_usd)
                    .bind(&new.source)
                    .bind(new.predicted_ttft_ms)
                    .bind(new.observed_ttft_ms)
                    .bind(new.raw_predicted_ttft_ms)
                    .bind(new.raw_predicted_latency_ms)
                    .bind(new.other_pools.as_ref().map(Json))
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_gateway_decisions(
                    &self,
                    window: TimeWindow,
                    limit: i64,
                ) -> Result<Vec<GatewayDecisionRow>> {
                    let rows = query_as::<Db, GatewayDecisionRow>(
                        "SELECT * FROM gateway_decisions WHERE decided_at >= $1 AND decided_at < $2 \
                         ORDER BY decided_at DESC, id DESC LIMIT $3",
                    )
                    .bind(stored(window.start))
                    .bind(stored(window.end))
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn insert_ledger_entry(
                    &self,
                    new: &NewLedgerEntry,
                ) -> Result<LedgerEntryRow> {
                    let row = query_as::<Db, LedgerEntryRow>(
                        "INSERT INTO budget_ledger (recorded_at, pool, amount_usd, tokens, note) \
                         VALUES ($1, $2, $3, $4, $5) RETURNING *",
                    )
                    .bind(stored(new.recorded_at))
                    .bind(&new.pool)
                    .bind(new.amount_usd)
                    .bind(new.tokens)
                    .bind(&new.note)
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_ledger_entries(
                    &self,
                    window: TimeWindow,
                ) -> Result<Vec<LedgerEntryRow>> {
                    let rows = query_as::<Db, LedgerEntryRow>(
                        "SELECT * FROM budget_ledger WHERE recorded_at >= $1 AND recorded_at < $2 \
                         ORDER BY recorded_at, id",
                    )
                    .bind(stored(window.start))
                    .bind(stored(window.end))
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn ledger_total(
                    &self,
                    window: TimeWindow,
                    pool: Option<&str>,
                ) -> Result<LedgerTotal> {
                    let total = query_as::<Db, LedgerTotal>(
                        "SELECT CAST(COALESCE(SUM(amount_usd), 0.0) AS DOUBLE PRECISION) AS amount_usd, \
                         CAST(COALESCE(SUM(tokens), 0) AS BIGINT) AS tokens FROM budget_ledger \
                         WHERE recorded_at >= $1 AND recorded_at < $2 AND ($3 IS NULL OR pool = $3)",
                    )
                    .bind(stored(window.start))
                    .bind(stored(window.end))
                    .bind(pool)
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(total)
                }

                async fn enqueue_profile_job(&self, spec: &Value) -> Result<ProfileJobRow> {
                    let row = query_as::<Db, ProfileJobRow>(
                        "INSERT INTO profile_jobs (spec, status, attempts, enqueued_at) \
                         VALUES ($1, $2, 0, $3) RETURNING *",
                    )
                    .bind(Json(spec))
                    .bind(JobStatus::Queued.as_str())
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn claim_next_profile_job(
                    &self,
                    worker: &str,
                ) -> Result<Option<ProfileJobRow>> {
                    let claimed = self.claim_next(worker, now(), None).await?;
                    if let Some(job) = &claimed {
                        let attempts = job.attempts;
                        tracing::debug!(job = %job.id, worker, attempts, "claimed profile job");
                    }
                    Ok(claimed)
                }

                async fn claim_next_profile_job_leased(
                    &self,
                    worker: &str,
                    lease: std::time::Duration,
                ) -> Result<Option<ProfileJobRow>> {
                    let at = now();
                    let lease = chrono::Duration::from_std(lease)
                        .unwrap_or(chrono::Duration::MAX);
                    let expired_before = at.checked_sub_signed(lease).unwrap_or(at);
                    let claimed = self.claim_next(worker, at, Some(expired_before)).await?;
                    if let Some(job) = &claimed {
                        let attempts = job.attempts;
                        tracing::debug!(job = %job.id, worker, attempts, "claimed profile job (leased)");
                    }
                    Ok(claimed)
                }

                async fn renew_profile_job_lease(
                    &self,
                    id: ProfileJobId,
                    worker: &str,
                ) -> Result<bool> {
                    let renewed = sqlx::query::<Db>(
                        "UPDATE profile_jobs SET claimed_at = $3 \
                         WHERE id = $1 AND claimed_by = $2 AND status = 'running'",
                    )
                    .bind(id)
                    .bind(worker)
                    .bind(now())
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                    Ok(renewed == 1)
                }

                async fn complete_profile_job(
                    &self,
                    id: ProfileJobId,
                    outcome: &JobOutcome,
                ) -> Result<ProfileJobRow> {
                    let (status, run_id, error) = match outcome {
                        JobOutcome::Done { run_id } => (JobStatus::Done, *run_id, None),
                        JobOutcome::Failed { error } => {
                            (JobStatus::Failed, None, Some(error.as_str()))
                        }
                    };
                    let row = query_as::<Db, ProfileJobRow>(
                        "UPDATE profile_jobs SET status = $2, finished_at = $3, run_id = $4, error = $5 \
                         WHERE id = $1 AND status = $6 RETURNING *",
                    )
                    .bind(id)
                    .bind(status.as_str())
                    .bind(now())
                    .bind(run_id)
                    .bind(error)
                    .bind(JobStatus::Running.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                    let Some(row) = row else {
                        // Tell a missing job from one that is not running.
                        self.get_profile_job(id).await?;
                        return Err(StoreError::JobNotRunning { id });
                    };
                    Ok(row)
                }

                async fn get_profile_job(&self, id: ProfileJobId) -> Result<ProfileJobRow> {
                    query_as::<Db, ProfileJobRow>("SELECT * FROM profile_jobs WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                        .ok_or_else(|| StoreError::not_found("profile job", id))
                }

                async fn list_profile_jobs(
                    &self,
                    status: Option<JobStatus>,
                ) -> Result<Vec<ProfileJobRow>> {
                    let rows = query_as::<Db, ProfileJobRow>(
                        "SELECT * FROM profile_jobs WHERE ($1 IS NULL OR status = $1) ORDER BY id",
                    )
                    .bind(status.map(JobStatus::as_str))
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn insert_endpoint(&self, new: &NewEndpoint) -> Result<EndpointRow> {
                    let row = query_as::<Db, EndpointRow>(
                        "INSERT INTO endpoints (base_url, model_name, created_at) VALUES ($1, $2, $3) \
                         RETURNING *",
                    )
                    .bind(&new.base_url)
                    .bind(&new.model_name)
                    .bind(now())
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn find_endpoint(&self, new: &NewEndpoint) -> Result<Option<EndpointRow>> {
                    let row = query_as::<Db, EndpointRow>(
                        "SELECT * FROM endpoints WHERE base_url = $1 AND model_name = $2",
                    )
                    .bind(&new.base_url)
                    .bind(&new.model_name)
                    .fetch_optional(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_endpoints(&self) -> Result<Vec<EndpointRow>> {
                    let rows = query_as::<Db, EndpointRow>(
                        "SELECT * FROM endpoints ORDER BY base_url, model_name",
                    )
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }

                async fn insert_endpoint_run(&self, new: &NewEndpointRun) -> Result<EndpointRunRow> {
                    let row = query_as::<Db, EndpointRunRow>(
                        "INSERT INTO endpoint_runs (endpoint_id, started_at, finished_at, api, \
                         workload_shape, request_count, error_count, ttft_p50_ms, ttft_p99_ms, \
                         tpot_p50_ms, tpot_p99_ms, e2e_p50_ms, e2e_p99_ms, output_tokens_per_s, \
                         requests_per_s, goodput_requests_per_s, sla_attainment, report, client_version) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                         $17, $18, $19) RETURNING *",
                    )
                    .bind(new.endpoint_id)
                    .bind(stored(new.started_at))
                    .bind(stored(new.finished_at))
                    .bind(&new.api)
                    .bind(Json(&new.workload_shape))
                    .bind(new.request_count)
                    .bind(new.error_count)
                    .bind(new.ttft_p50_ms)
                    .bind(new.ttft_p99_ms)
                    .bind(new.tpot_p50_ms)
                    .bind(new.tpot_p99_ms)
                    .bind(new.e2e_p50_ms)
                    .bind(new.e2e_p99_ms)
                    .bind(new.output_tokens_per_s)
                    .bind(new.requests_per_s)
                    .bind(new.goodput_requests_per_s)
                    .bind(new.sla_attainment)
                    .bind(Json(&new.report))
                    .bind(&new.client_version)
                    .fetch_one(&self.pool)
                    .await?;
                    Ok(row)
                }

                async fn list_endpoint_runs(
                    &self,
                    endpoint_id: EndpointId,
                ) -> Result<Vec<EndpointRunRow>> {
                    let rows = query_as::<Db, EndpointRunRow>(
                        "SELECT * FROM endpoint_runs WHERE endpoint_id = $1 \
                         ORDER BY started_at DESC, id DESC",
                    )
                    .bind(endpoint_id)
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows)
                }
            }
        };
    };
}

pub(super) use impl_store;
