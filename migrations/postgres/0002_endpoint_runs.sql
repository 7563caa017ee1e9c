-- Profiles of OpenAI-compatible endpoints measured from outside, PostgreSQL dialect.
-- migrations/sqlite/0002_endpoint_runs.sql holds the same tables and columns.
-- They live apart from configs and profile_runs, which describe this engine's own configs on a host,
-- so that the planner never takes an endpoint for a CPU candidate.

-- An endpoint and the model name it serves (a GPU fallback, a hosted API, another server).
CREATE TABLE endpoints (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    base_url   TEXT NOT NULL,
    model_name TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    CONSTRAINT endpoints_url_model_key UNIQUE (base_url, model_name)
);

-- One measured run against an endpoint: the headline figures as columns, the whole report as JSON.
CREATE TABLE endpoint_runs (
    id                     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id            BIGINT NOT NULL REFERENCES endpoints (id),
    started_at             TIMESTAMPTZ NOT NULL,
    finished_at            TIMESTAMPTZ NOT NULL,
    api                    TEXT NOT NULL,
    workload_shape         JSONB NOT NULL,
    request_count          BIGINT NOT NULL,
    error_count            BIGINT NOT NULL,
    ttft_p50_ms            DOUBLE PRECISION NOT NULL,
    ttft_p99_ms            DOUBLE PRECISION NOT NULL,
    tpot_p50_ms            DOUBLE PRECISION NOT NULL,
    tpot_p99_ms            DOUBLE PRECISION NOT NULL,
    e2e_p50_ms             DOUBLE PRECISION NOT NULL,
    e2e_p99_ms             DOUBLE PRECISION NOT NULL,
    output_tokens_per_s    DOUBLE PRECISION NOT NULL,
    requests_per_s         DOUBLE PRECISION NOT NULL,
    goodput_requests_per_s DOUBLE PRECISION NOT NULL,
    sla_attainment         DOUBLE PRECISION NOT NULL,
    report                 JSONB NOT NULL,
    client_version         TEXT NOT NULL,
    CHECK (finished_at >= started_at)
);

CREATE INDEX endpoint_runs_endpoint_started ON endpoint_runs (endpoint_id, started_at);
