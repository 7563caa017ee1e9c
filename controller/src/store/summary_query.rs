//! The SQL behind `Store::list_config_summaries`, the same on both backends: the query, and the
//! `ORDER BY` list for each sort key.

use super::ConfigSort;

/// The config summaries' query without its order and limit. Window functions pick the latest run per
/// config and host, the latest capacity result per config and host, the latest quality result per
/// config, and the latest reference (no top-1 agreement) quality result per model and text.
pub(super) const CONFIG_SUMMARIES: &str = "\
    WITH runs AS (\
        SELECT r.*, \
               ROW_NUMBER() OVER (PARTITION BY r.config_id, r.hardware_id \
                                  ORDER BY r.started_at DESC, r.id DESC) AS pick, \
               COUNT(*) OVER (PARTITION BY r.config_id, r.hardware_id) AS run_count \
        FROM profile_runs r), \
    caps AS (\
        SELECT k.*, ROW_NUMBER() OVER (PARTITION BY k.config_id, k.hardware_id \
                                       ORDER BY k.created_at DESC, k.id DESC) AS pick \
        FROM capacity_results k), \
    quals AS (\
        SELECT q.*, ROW_NUMBER() OVER (PARTITION BY q.config_id \
                                       ORDER BY q.created_at DESC, q.id DESC) AS pick \
        FROM quality_results q), \
    refs AS (\
        SELECT c.model_id, q.text_id, q.perplexity, \
               ROW_NUMBER() OVER (PARTITION BY c.model_id, q.text_id \
                                  ORDER BY q.created_at DESC, q.id DESC) AS pick \
        FROM quality_results q JOIN configs c ON c.id = q.config_id \
        WHERE q.top1_agreement IS NULL) \
    SELECT runs.id AS run_id, runs.run_count, runs.config_id, runs.hardware_id, \
           c.model_id, m.name AS model_name, m.synthetic AS model_synthetic, c.weight_type, c.threads, c.max_batch, c.numa_policy, \
           c.kv_memory_mib, h.cpu_model, h.cores, h.numa_nodes, runs.started_at, runs.request_count, \
           runs.error_count, runs.ttft_p50_ms, runs.ttft_p99_ms, runs.tpot_p50_ms, runs.tpot_p99_ms, \
           runs.e2e_p50_ms, runs.e2e_p99_ms, runs.output_tokens_per_s, runs.total_tokens_per_s, \
           runs.goodput_requests_per_s, runs.sla_attainment, runs.peak_rss_bytes, runs.kernel_tier, \
           caps.max_requests_per_s AS capacity_requests_per_s, \
           caps.sla_ttft_p99_ms AS capacity_sla_ttft_p99_ms, \
           caps.sla_tpot_p99_ms AS capacity_sla_tpot_p99_ms, \
           quals.perplexity, quals.top1_agreement, refs.perplexity AS reference_perplexity \
    FROM runs \
    JOIN configs c ON c.id = runs.config_id \
    JOIN models m ON m.id = c.model_id \
    JOIN hardware h ON h.id = runs.hardware_id \
    LEFT JOIN caps ON caps.config_id = runs.config_id AND caps.hardware_id = runs.hardware_id \
                  AND caps.pick = 1 \
    LEFT JOIN quals ON quals.config_id = runs.config_id AND quals.pick = 1 \
    LEFT JOIN refs ON refs.model_id = c.model_id AND refs.text_id = quals.text_id AND refs.pick = 1 \
    WHERE runs.pick = 1 \
      AND ($1 IS NULL OR m.name = $1) \
      AND ($2 IS NULL OR c.weight_type = $2) \
      AND ($3 IS NULL OR runs.hardware_id = $3) \
      AND ($4 IS NULL OR c.threads = $4) \
      AND ($5 IS NULL OR c.max_batch = $5) \
      AND ($6 IS NULL OR c.numa_policy = $6)";

/// The `ORDER BY` list for a sort key: a fixed column (never user text), rows without a value last,
/// ties broken by run id.
pub(super) fn order_by(sort: ConfigSort, descending: bool) -> String {
    let dir = if descending { "DESC" } else { "ASC" };
    let columns: &[&str] = match sort {
        ConfigSort::StartedAt => &["runs.started_at"],
        ConfigSort::Model => &[
            "m.name",
            "c.weight_type",
            "c.threads",
            "c.max_batch",
            "c.numa_policy",
        ],
        ConfigSort::OutputTokensPerS => &["runs.output_tokens_per_s"],
        ConfigSort::TtftP50 => &["runs.ttft_p50_ms"],
        ConfigSort::TtftP99 => &["runs.ttft_p99_ms"],
        ConfigSort::TpotP99 => &["runs.tpot_p99_ms"],
        ConfigSort::E2eP99 => &["runs.e2e_p99_ms"],
        ConfigSort::Capacity => &["caps.max_requests_per_s IS NULL", "caps.max_requests_per_s"],
        ConfigSort::Top1Agreement => &["quals.top1_agreement IS NULL", "quals.top1_agreement"],
    };
    let mut order: Vec<String> = columns
        .iter()
        .map(|column| {
            if column.ends_with("IS NULL") {
                format!("{column} ASC")
            } else {
                format!("{column} {dir}")
            }
        })
        .collect();
    order.push(format!("runs.id {dir}"));
    order.join(", ")
}
