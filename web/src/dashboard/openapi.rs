//! The OpenAPI 3.1 document of the dashboard's JSON API, served at `/api/openapi.json`.

use serde_json::{Value, json};

fn text_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description,
           "schema": {"type": "string"}})
}

fn int_param(name: &str, description: &str, min: i64, max: i64) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description,
           "schema": {"type": "integer", "minimum": min, "maximum": max}})
}

fn ok(description: &str, schema: &str) -> Value {
    json!({
        "200": {"description": description,
                "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}},
        "400": {"$ref": "#/components/responses/BadRequest"},
        "500": {"$ref": "#/components/responses/ServerError"}
    })
}

/// The schema of one config table row (apart: one `json!` of the whole document is too deep).
fn config_row_schema() -> Value {
    json!({"type": "object", "properties": {
        "run_id": {"type": "integer"}, "run_count": {"type": "integer"}, "config_id": {"type": "integer"},
        "hardware_id": {"type": "integer"}, "model_name": {"type": "string"}, "model_synthetic": {"type": "boolean"}, "weight_type": {"type": "string"},
        "threads": {"type": "integer"}, "max_batch": {"type": "integer"}, "numa_policy": {"type": "string"},
        "cpu_model": {"type": "string"}, "output_tokens_per_s": {"type": "number"},
        "ttft_p50_ms": {"type": "number"}, "ttft_p99_ms": {"type": "number"},
        "tpot_p50_ms": {"type": "number"}, "tpot_p99_ms": {"type": "number"},
        "e2e_p50_ms": {"type": "number"}, "e2e_p99_ms": {"type": "number"},
        "capacity_requests_per_s": {"type": ["number", "null"]},
        "perplexity": {"type": ["number", "null"]}, "perplexity_delta": {"type": ["number", "null"]},
        "top1_agreement": {"type": ["number", "null"]},
        "usd_per_million_output_tokens": {"type": ["number", "null"]},
        "instance": {"type": ["string", "null"]},
        "costed_output_tokens_per_s": {"type": "number", "description": "the host's output rate the row is costed at"},
        "cost_basis": {"type": "string", "enum": ["capacity", "measured_run"]},
        "scaling": {"type": ["object", "null"], "properties": {"rule": {"type": "string"}, "factor": {"type": "number"}}},
        "gpu": {"type": "boolean"}, "pareto": {"type": "boolean"}}})
}

/// The document.
pub(crate) fn document() -> Value {
    let mut run_responses = ok(
        "The run, its config, model, host, capacity and quality results.",
        "Run",
    );
    run_responses["404"] = json!({"$ref": "#/components/responses/NotFound"});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Strata dashboard API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The data behind each dashboard page. Latencies are milliseconds, money USD."
        },
        "paths": {
            "/api/configs": {"get": {
                "summary": "Every measured config: latest run per config and host, with $ per 1M output tokens.",
                "parameters": [
                    text_param("model", "only this model, by name"),
                    text_param("weights", "only this runtime weight type (q8_0, q4_1, ...)"),
                    int_param("host", "only this host id", 1, i64::MAX),
                    int_param("threads", "only this thread count", 1, 1 << 20),
                    int_param("batch", "only this batch size", 1, 1 << 20),
                    text_param("numa", "only this NUMA policy"),
                    {"name": "sort", "in": "query", "required": false, "schema": {"type": "string", "enum": [
                        "cost", "started_at", "model", "output_tokens_per_s", "ttft_p50", "ttft_p99",
                        "tpot_p99", "e2e_p99", "capacity", "top1_agreement"]}},
                    {"name": "dir", "in": "query", "required": false, "schema": {"type": "string", "enum": ["asc", "desc"]}},
                    int_param("limit", "most rows (default 200)", 1, 1000),
                    text_param("instance", "CPU instance type to cost every CPU config on (default: per host, the type with its vCPUs, else the cheapest that fits)"),
                    text_param("gpu_instance", "GPU instance type to cost GPU endpoints on"),
                    {"name": "price", "in": "query", "required": false, "schema": {"type": "string", "enum": [
                        "on-demand", "spot", "committed-1y", "committed-3y"]}},
                    {"name": "pue", "in": "query", "required": false, "schema": {"type": "number", "minimum": 1}},
                    {"name": "kwh_usd", "in": "query", "required": false, "schema": {"type": "number", "minimum": 0}},
                    {"name": "ops_usd_per_hour", "in": "query", "required": false, "schema": {"type": "number", "minimum": 0}}
                ],
                "responses": ok("The config table.", "Configs")
            }},
            "/api/runs/{id}": {"get": {
                "summary": "One profiling run in full.",
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer", "minimum": 1}}],
                "responses": run_responses
            }},
            "/api/plans": {"get": {
                "summary": "The latest capacity plan of each workload, hour by hour.",
                "responses": ok("The plans.", "Plans")
            }},
            "/api/pilots": {"get": {
                "summary": "Every pilot evaluation with its verdict and report.",
                "responses": ok("The pilots.", "Pilots")
            }},
            "/api/gateway": {"get": {
                "summary": "The gateway's recent decisions by source, pool and class, spend against budget, breakers.",
                "parameters": [int_param("window", "minutes to look back (default 60)", 1, 10080),
                    text_param("source", "only this traffic: `live`, or a pilot's replay `pilot:WORKLOAD` (default: every source)")],
                "responses": ok("The gateway's traffic.", "Gateway")
            }},
            "/api/openapi.json": {"get": {
                "summary": "This document.",
                "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {}}}}
            }}
        },
        "components": {
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["message", "type", "code"],
                    "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"}}}}},
                "Configs": {"type": "object", "required": ["query", "pricing", "instances", "rows"], "properties": {
                    "query": {"type": "object", "additionalProperties": {"type": "string"}},
                    "pricing": {"type": "object", "description": "price model, site costs, the chosen CPU instance (or null), each host's default instance (`hosts`), the GPU instance"},
                    "gpu_baseline": {"type": ["object", "null"], "description": "The latest workload's GPU baseline as a point: name, usd_per_million_output_tokens, e2e_p99_ms, basis", "properties": {
                        "workload": {"type": "string"}, "name": {"type": "string"},
                        "usd_per_million_output_tokens": {"type": "number"}, "e2e_p99_ms": {"type": "number"},
                        "basis": {"type": "string"}}},
                    "instances": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string"}, "gpu": {"type": "boolean"}}}},
                    "rows": {"type": "array", "items": {"$ref": "#/components/schemas/ConfigRow"}}}},
                "ConfigRow": config_row_schema(),
                "Run": {"type": "object", "required": ["run", "config", "model", "hardware", "load_curve", "quality"],
                    "properties": {"run": {"type": "object"}, "config": {"type": "object"}, "model": {"type": "object"},
                        "hardware": {"type": "object"}, "capacity": {"type": ["object", "null"]},
                        "load_curve": {"type": "array", "description": "The capacity result's points as profiling stores them", "items": {"type": "object", "properties": {
                            "rate_rps": {"type": "number"}, "ttft_p99_ms": {"type": "number"}, "tpot_p99_ms": {"type": "number"},
                            "e2e_p99_ms": {"type": "number"}, "output_tokens_per_s": {"type": "number"},
                            "total_tokens_per_s": {"type": "number"}}}},
                        "load_curve_problem": {"type": ["string", "null"]},
                        "quality": {"type": "array"}, "sibling_runs": {"type": "array", "items": {"type": "integer"}}}},
                "Plans": {"type": "object", "properties": {"plans": {"type": "array", "items": {"type": "object", "properties": {
                    "workload": {"type": "string"}, "plan_id": {"type": "integer"}, "total_cost_usd": {"type": "number"},
                    "all_gpu_cost_usd": {"type": ["number", "null"]}, "savings_usd": {"type": ["number", "null"]},
                    "config": {"type": ["string", "null"]}, "instance_type": {"type": ["string", "null"]},
                    "hours": {"type": "array"}, "problem": {"type": ["string", "null"]}, "plan": {}}}}}},
                "Pilots": {"type": "object", "properties": {"pilots": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "integer"}, "workload": {"type": "string"}, "status": {"type": "string"},
                    "verdict": {"type": ["string", "null"]},
                    "detail": {"description": "The report of `strata pilot` (schema version 1, see controller/README.md), or null"},
                    "error": {"type": ["string", "null"]}, "problem": {"type": ["string", "null"]},
                    "report": {}}}}}},
                "Gateway": {"type": "object", "properties": {
                    "window_minutes": {"type": "integer"}, "generated_at": {"type": "string", "format": "date-time"},
                    "requests": {"type": "integer"}, "source": {"type": ["string", "null"]},
                    "sources": {"type": "array", "items": {"type": "object", "properties": {
                        "source": {"type": "string"}, "requests": {"type": "integer"}}}},
                    "traffic": {"type": "array", "items": {"type": "object", "properties": {
                        "source": {"type": "string"}, "pool": {"type": "string"}, "class": {"type": "string"}, "requests": {"type": "integer"},
                        "p99_latency_ms": {"type": ["number", "null"]}, "sla_ms": {"type": ["number", "null"]},
                        "sla_attainment": {"type": ["number", "null"]}, "cost_usd": {"type": "number"}}}},
                    "spend": {"type": "object", "properties": {"today_usd": {"type": "number"},
                        "budget_per_day_usd": {"type": ["number", "null"]}, "used_fraction": {"type": ["number", "null"]}}},
                    "predictions": {"type": "array", "items": {"type": "object", "properties": {
                        "pool": {"type": "string"},
                        "ttft": {"$ref": "#/components/schemas/LatencyErrors"},
                        "e2e": {"$ref": "#/components/schemas/LatencyErrors"},
                        "e2e_by_later": {"type": "object", "description": "Corrected E2E errors of the requests no later request to the same endpoint met (none) and of those it met (some).", "properties": {
                            "none": {"$ref": "#/components/schemas/ErrorSummary"},
                            "some": {"$ref": "#/components/schemas/ErrorSummary"}}}}}},
                    "calibration": {"type": "array", "items": {"type": "object", "properties": {
                        "pool": {"type": "string"}, "raw_predicted_ms": {"type": ["number", "null"]},
                        "predicted_ms": {"type": "number"}, "observed_ms": {"type": "number"}}}},
                    "breakers": {"type": "array"}, "recent": {"type": "array"}}},
                "LatencyErrors": {"type": "object", "properties": {
                    "raw": {"$ref": "#/components/schemas/ErrorSummary"},
                    "corrected": {"$ref": "#/components/schemas/ErrorSummary"}}},
                "ErrorSummary": {"type": ["object", "null"], "properties": {
                    "requests": {"type": "integer"}, "mape": {"type": "number"},
                    "p90": {"type": "number"}, "bias": {"type": "number"}}}
            },
            "responses": {
                "BadRequest": {"description": "A query parameter or path value is not valid; the message says which and why.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "NotFound": {"description": "No such row.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                "ServerError": {"description": "The store failed.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
            }
        }
    })
}
