-- The first Strata store schema, SQLite dialect.
-- migrations/postgres/0001_initial.sql holds the same tables and columns; a test keeps the two in step.
-- Timestamps are RFC 3339 text in UTC, which sorts in time order; JSON is text.
-- Unique constraints carry the names listed in controller/src/store/constraint.rs.

-- A CPU host as measured by the fingerprinting job.
CREATE TABLE hardware (
    id                 INTEGER PRIMARY KEY,
    fingerprint_hash   TEXT NOT NULL,
    cpu_model          TEXT NOT NULL,
    cores              INTEGER NOT NULL CHECK (cores > 0),
    threads            INTEGER NOT NULL CHECK (threads > 0),
    isa_flags          TEXT NOT NULL CHECK (json_valid(isa_flags)),
    l1d_cache_bytes    INTEGER,
    l2_cache_bytes     INTEGER,
    l3_cache_bytes     INTEGER,
    numa_nodes         INTEGER NOT NULL CHECK (numa_nodes > 0),
    memory_bytes       INTEGER NOT NULL,
    bandwidth_gb_per_s REAL,
    peak_int8_gops     REAL,
    peak_f32_gops      REAL,
    created_at         TEXT NOT NULL,
    CONSTRAINT hardware_fingerprint_hash_key UNIQUE (fingerprint_hash)
);

-- A model file known to the controller.
CREATE TABLE models (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    path        TEXT NOT NULL,
    format      TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size_bytes  INTEGER NOT NULL,
    parameters  INTEGER,
    created_at  TEXT NOT NULL,
    CONSTRAINT models_name_key UNIQUE (name),
    CONSTRAINT models_sha256_key UNIQUE (sha256)
);

-- One point of the profiling space: a model run with given settings.
CREATE TABLE configs (
    id            INTEGER PRIMARY KEY,
    model_id      INTEGER NOT NULL REFERENCES models (id),
    weight_type   TEXT NOT NULL,
    threads       INTEGER NOT NULL CHECK (threads > 0),
    max_batch     INTEGER NOT NULL CHECK (max_batch > 0),
    numa_policy   TEXT NOT NULL,
    kv_memory_mib INTEGER NOT NULL,
    created_at    TEXT NOT NULL,
    CONSTRAINT configs_settings_key
        UNIQUE (model_id, weight_type, threads, max_batch, numa_policy, kv_memory_mib)
);

-- One measured run of a config on a host.
CREATE TABLE profile_runs (
    id                     INTEGER PRIMARY KEY,
    config_id              INTEGER NOT NULL REFERENCES configs (id),
    hardware_id            INTEGER NOT NULL REFERENCES hardware (id),
    started_at             TEXT NOT NULL,
    finished_at            TEXT NOT NULL,
    workload_shape         TEXT NOT NULL CHECK (json_valid(workload_shape)),
    request_count          INTEGER NOT NULL,
    error_count            INTEGER NOT NULL,
    ttft_p50_ms            REAL NOT NULL,
    ttft_p90_ms            REAL NOT NULL,
    ttft_p95_ms            REAL NOT NULL,
    ttft_p99_ms            REAL NOT NULL,
    tpot_p50_ms            REAL NOT NULL,
    tpot_p90_ms            REAL NOT NULL,
    tpot_p95_ms            REAL NOT NULL,
    tpot_p99_ms            REAL NOT NULL,
    itl_p50_ms             REAL NOT NULL,
    itl_p90_ms             REAL NOT NULL,
    itl_p95_ms             REAL NOT NULL,
    itl_p99_ms             REAL NOT NULL,
    e2e_p50_ms             REAL NOT NULL,
    e2e_p90_ms             REAL NOT NULL,
    e2e_p95_ms             REAL NOT NULL,
    e2e_p99_ms             REAL NOT NULL,
    output_tokens_per_s    REAL NOT NULL,
    total_tokens_per_s     REAL NOT NULL,
    requests_per_s         REAL NOT NULL,
    goodput_requests_per_s REAL NOT NULL,
    sla_attainment         REAL NOT NULL,
    peak_rss_bytes         INTEGER NOT NULL,
    cpu_utilization        REAL NOT NULL,
    kernel_tier            TEXT NOT NULL,
    placement              TEXT NOT NULL,
    engine_version         TEXT NOT NULL,
    CHECK (finished_at >= started_at)
);

CREATE INDEX profile_runs_config_started ON profile_runs (config_id, started_at);

-- The highest load a config sustains on a host within SLA targets.
CREATE TABLE capacity_results (
    id                 INTEGER PRIMARY KEY,
    config_id          INTEGER NOT NULL REFERENCES configs (id),
    hardware_id        INTEGER NOT NULL REFERENCES hardware (id),
    run_id             INTEGER REFERENCES profile_runs (id),
    sla_ttft_p99_ms    REAL NOT NULL,
    sla_tpot_p99_ms    REAL NOT NULL,
    max_requests_per_s REAL NOT NULL,
    load_curve         TEXT NOT NULL CHECK (json_valid(load_curve)),
    created_at         TEXT NOT NULL
);

CREATE INDEX capacity_results_config ON capacity_results (config_id, created_at);

-- Output quality of a config against a fixed text.
CREATE TABLE quality_results (
    id             INTEGER PRIMARY KEY,
    config_id      INTEGER NOT NULL REFERENCES configs (id),
    text_id        TEXT NOT NULL,
    perplexity     REAL NOT NULL,
    top1_agreement REAL,
    created_at     TEXT NOT NULL
);

CREATE INDEX quality_results_config ON quality_results (config_id, created_at);

-- A price list entry for one instance type on one day.
CREATE TABLE catalog_prices (
    id                     INTEGER PRIMARY KEY,
    provider               TEXT NOT NULL,
    region                 TEXT NOT NULL,
    instance_type          TEXT NOT NULL,
    vcpus                  INTEGER NOT NULL,
    memory_gib             REAL NOT NULL,
    accelerator            TEXT,
    accelerator_count      INTEGER NOT NULL,
    on_demand_usd_per_hour REAL NOT NULL,
    spot_usd_per_hour      REAL,
    committed_usd_per_hour REAL,
    watts                  REAL,
    source                 TEXT NOT NULL,
    price_date             TEXT NOT NULL,
    CONSTRAINT catalog_prices_instance_date_key UNIQUE (provider, region, instance_type, price_date)
);

-- A named traffic description that plans and pilots are made for.
CREATE TABLE workloads (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    spec       TEXT NOT NULL CHECK (json_valid(spec)),
    created_at TEXT NOT NULL,
    CONSTRAINT workloads_name_key UNIQUE (name)
);

-- A capacity plan computed for a workload.
CREATE TABLE plans (
    id                  INTEGER PRIMARY KEY,
    workload_id         INTEGER NOT NULL REFERENCES workloads (id),
    created_at          TEXT NOT NULL,
    plan                TEXT NOT NULL CHECK (json_valid(plan)),
    total_cost_usd      REAL NOT NULL,
    total_output_tokens INTEGER NOT NULL
);

CREATE INDEX plans_workload_created ON plans (workload_id, created_at);

-- A pilot evaluation of moving a workload to CPUs.
CREATE TABLE pilots (
    id          INTEGER PRIMARY KEY,
    workload_id INTEGER NOT NULL REFERENCES workloads (id),
    status      TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed')),
    verdict     TEXT,
    report      TEXT CHECK (json_valid(report)),
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE INDEX pilots_workload ON pilots (workload_id, created_at);

-- Where the gateway sent one request, and why.
CREATE TABLE gateway_decisions (
    id                   INTEGER PRIMARY KEY,
    decided_at           TEXT NOT NULL,
    request_id           TEXT NOT NULL,
    sla_class            TEXT NOT NULL,
    pool                 TEXT NOT NULL,
    endpoint             TEXT NOT NULL,
    reason               TEXT NOT NULL,
    predicted_latency_ms REAL,
    observed_latency_ms  REAL,
    prompt_tokens        INTEGER NOT NULL,
    output_tokens        INTEGER NOT NULL,
    cost_usd             REAL NOT NULL
);

CREATE INDEX gateway_decisions_decided ON gateway_decisions (decided_at);

-- Money spent per pool, for the budget policy.
CREATE TABLE budget_ledger (
    id          INTEGER PRIMARY KEY,
    recorded_at TEXT NOT NULL,
    pool        TEXT NOT NULL,
    amount_usd  REAL NOT NULL,
    tokens      INTEGER NOT NULL,
    note        TEXT
);

CREATE INDEX budget_ledger_recorded ON budget_ledger (recorded_at, pool);

-- Profiling work waiting for, or held by, a controller.
CREATE TABLE profile_jobs (
    id          INTEGER PRIMARY KEY,
    spec        TEXT NOT NULL CHECK (json_valid(spec)),
    status      TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed')),
    claimed_by  TEXT,
    attempts    INTEGER NOT NULL,
    enqueued_at TEXT NOT NULL,
    claimed_at  TEXT,
    finished_at TEXT,
    run_id      INTEGER REFERENCES profile_runs (id),
    error       TEXT
);

CREATE INDEX profile_jobs_queued ON profile_jobs (id) WHERE status = 'queued';
