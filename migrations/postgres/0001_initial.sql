-- The first Strata store schema, PostgreSQL dialect.
-- migrations/sqlite/0001_initial.sql holds the same tables and columns; a test keeps the two in step.
-- Unique constraints carry the names listed in controller/src/store/constraint.rs.

-- A CPU host as measured by the fingerprinting job.
CREATE TABLE hardware (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    fingerprint_hash   TEXT NOT NULL,
    cpu_model          TEXT NOT NULL,
    cores              BIGINT NOT NULL CHECK (cores > 0),
    threads            BIGINT NOT NULL CHECK (threads > 0),
    isa_flags          JSONB NOT NULL,
    l1d_cache_bytes    BIGINT,
    l2_cache_bytes     BIGINT,
    l3_cache_bytes     BIGINT,
    numa_nodes         BIGINT NOT NULL CHECK (numa_nodes > 0),
    memory_bytes       BIGINT NOT NULL,
    bandwidth_gb_per_s DOUBLE PRECISION,
    peak_int8_gops     DOUBLE PRECISION,
    peak_f32_gops      DOUBLE PRECISION,
    created_at         TIMESTAMPTZ NOT NULL,
    CONSTRAINT hardware_fingerprint_hash_key UNIQUE (fingerprint_hash)
);

-- A model file known to the controller.
CREATE TABLE models (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        TEXT NOT NULL,
    path        TEXT NOT NULL,
    format      TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    parameters  BIGINT,
    created_at  TIMESTAMPTZ NOT NULL,
    CONSTRAINT models_name_key UNIQUE (name),
    CONSTRAINT models_sha256_key UNIQUE (sha256)
);

-- One point of the profiling space: a model run with given settings.
CREATE TABLE configs (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_id      BIGINT NOT NULL REFERENCES models (id),
    weight_type   TEXT NOT NULL,
    threads       BIGINT NOT NULL CHECK (threads > 0),
    max_batch     BIGINT NOT NULL CHECK (max_batch > 0),
    numa_policy   TEXT NOT NULL,
    kv_memory_mib BIGINT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL,
    CONSTRAINT configs_settings_key
        UNIQUE (model_id, weight_type, threads, max_batch, numa_policy, kv_memory_mib)
);

-- One measured run of a config on a host.
CREATE TABLE profile_runs (
    id                     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    config_id              BIGINT NOT NULL REFERENCES configs (id),
    hardware_id            BIGINT NOT NULL REFERENCES hardware (id),
    started_at             TIMESTAMPTZ NOT NULL,
    finished_at            TIMESTAMPTZ NOT NULL,
    workload_shape         JSONB NOT NULL,
    request_count          BIGINT NOT NULL,
    error_count            BIGINT NOT NULL,
    ttft_p50_ms            DOUBLE PRECISION NOT NULL,
    ttft_p90_ms            DOUBLE PRECISION NOT NULL,
    ttft_p95_ms            DOUBLE PRECISION NOT NULL,
    ttft_p99_ms            DOUBLE PRECISION NOT NULL,
    tpot_p50_ms            DOUBLE PRECISION NOT NULL,
    tpot_p90_ms            DOUBLE PRECISION NOT NULL,
    tpot_p95_ms            DOUBLE PRECISION NOT NULL,
    tpot_p99_ms            DOUBLE PRECISION NOT NULL,
    itl_p50_ms             DOUBLE PRECISION NOT NULL,
    itl_p90_ms             DOUBLE PRECISION NOT NULL,
    itl_p95_ms             DOUBLE PRECISION NOT NULL,
    itl_p99_ms             DOUBLE PRECISION NOT NULL,
    e2e_p50_ms             DOUBLE PRECISION NOT NULL,
    e2e_p90_ms             DOUBLE PRECISION NOT NULL,
    e2e_p95_ms             DOUBLE PRECISION NOT NULL,
    e2e_p99_ms             DOUBLE PRECISION NOT NULL,
    output_tokens_per_s    DOUBLE PRECISION NOT NULL,
    total_tokens_per_s     DOUBLE PRECISION NOT NULL,
    requests_per_s         DOUBLE PRECISION NOT NULL,
    goodput_requests_per_s DOUBLE PRECISION NOT NULL,
    sla_attainment         DOUBLE PRECISION NOT NULL,
    peak_rss_bytes         BIGINT NOT NULL,
    cpu_utilization        DOUBLE PRECISION NOT NULL,
    kernel_tier            TEXT NOT NULL,
    placement              TEXT NOT NULL,
    engine_version         TEXT NOT NULL,
    CHECK (finished_at >= started_at)
);

CREATE INDEX profile_runs_config_started ON profile_runs (config_id, started_at);

-- The highest load a config sustains on a host within SLA targets.
CREATE TABLE capacity_results (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    config_id          BIGINT NOT NULL REFERENCES configs (id),
    hardware_id        BIGINT NOT NULL REFERENCES hardware (id),
    run_id             BIGINT REFERENCES profile_runs (id),
    sla_ttft_p99_ms    DOUBLE PRECISION NOT NULL,
    sla_tpot_p99_ms    DOUBLE PRECISION NOT NULL,
    max_requests_per_s DOUBLE PRECISION NOT NULL,
    load_curve         JSONB NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL
);

CREATE INDEX capacity_results_config ON capacity_results (config_id, created_at);

-- Output quality of a config against a fixed text.
CREATE TABLE quality_results (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    config_id      BIGINT NOT NULL REFERENCES configs (id),
    text_id        TEXT NOT NULL,
    perplexity     DOUBLE PRECISION NOT NULL,
    top1_agreement DOUBLE PRECISION,
    created_at     TIMESTAMPTZ NOT NULL
);

CREATE INDEX quality_results_config ON quality_results (config_id, created_at);

-- A price list entry for one instance type on one day.
CREATE TABLE catalog_prices (
    id                     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider               TEXT NOT NULL,
    region                 TEXT NOT NULL,
    instance_type          TEXT NOT NULL,
    vcpus                  BIGINT NOT NULL,
    memory_gib             DOUBLE PRECISION NOT NULL,
    accelerator            TEXT,
    accelerator_count      BIGINT NOT NULL,
    on_demand_usd_per_hour DOUBLE PRECISION NOT NULL,
    spot_usd_per_hour      DOUBLE PRECISION,
    committed_usd_per_hour DOUBLE PRECISION,
    watts                  DOUBLE PRECISION,
    source                 TEXT NOT NULL,
    price_date             DATE NOT NULL,
    CONSTRAINT catalog_prices_instance_date_key UNIQUE (provider, region, instance_type, price_date)
);

-- A named traffic description that plans and pilots are made for.
CREATE TABLE workloads (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       TEXT NOT NULL,
    spec       JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT workloads_name_key UNIQUE (name)
);

-- A capacity plan computed for a workload.
CREATE TABLE plans (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workload_id         BIGINT NOT NULL REFERENCES workloads (id),
    created_at          TIMESTAMPTZ NOT NULL,
    plan                JSONB NOT NULL,
    total_cost_usd      DOUBLE PRECISION NOT NULL,
    total_output_tokens BIGINT NOT NULL
);

CREATE INDEX plans_workload_created ON plans (workload_id, created_at);

-- A pilot evaluation of moving a workload to CPUs.
CREATE TABLE pilots (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workload_id BIGINT NOT NULL REFERENCES workloads (id),
    status      TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
    verdict     TEXT,
    report      JSONB,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);

CREATE INDEX pilots_workload ON pilots (workload_id, created_at);

-- Where the gateway sent one request, and why.
CREATE TABLE gateway_decisions (
    id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    decided_at           TIMESTAMPTZ NOT NULL,
    request_id           TEXT NOT NULL,
    sla_class            TEXT NOT NULL,
    pool                 TEXT NOT NULL,
    endpoint             TEXT NOT NULL,
    reason               TEXT NOT NULL,
    predicted_latency_ms DOUBLE PRECISION,
    observed_latency_ms  DOUBLE PRECISION,
    prompt_tokens        BIGINT NOT NULL,
    output_tokens        BIGINT NOT NULL,
    cost_usd             DOUBLE PRECISION NOT NULL
);

CREATE INDEX gateway_decisions_decided ON gateway_decisions (decided_at);

-- Money spent per pool, for the budget policy.
CREATE TABLE budget_ledger (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recorded_at TIMESTAMPTZ NOT NULL,
    pool        TEXT NOT NULL,
    amount_usd  DOUBLE PRECISION NOT NULL,
    tokens      BIGINT NOT NULL,
    note        TEXT
);

CREATE INDEX budget_ledger_recorded ON budget_ledger (recorded_at, pool);

-- Profiling work waiting for, or held by, a controller.
CREATE TABLE profile_jobs (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    spec        JSONB NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    claimed_by  TEXT,
    attempts    BIGINT NOT NULL,
    enqueued_at TIMESTAMPTZ NOT NULL,
    claimed_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    run_id      BIGINT REFERENCES profile_runs (id),
    error       TEXT
);

CREATE INDEX profile_jobs_queued ON profile_jobs (id) WHERE status = 'queued';
