//! The dashboard's pages and API on a seeded SQLite store, through `oneshot` (no sockets).

#[path = "common/seed.rs"]
mod seed;

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use http_body_util::BodyExt;
use serde_json::Value;
use strata_controller::{
    pilot::{self, PilotReport, StoredReport},
    store::{self, PilotStatus, PilotUpdate, Store},
};
use strata_planner::{catalog::Catalog, plan::Plan};
use tower::ServiceExt;

/// The builtin catalog's on-demand $/h of `name` (the first region listed).
fn on_demand_price(name: &str) -> f64 {
    Catalog::builtin()
        .find(name)
        .map(|i| i.on_demand_per_hour)
        .expect("a builtin instance type")
}

/// $ per 1M output tokens at `tokens_per_s` on `hourly` $/h.
fn per_million(hourly: f64, tokens_per_s: f64) -> f64 {
    hourly / (tokens_per_s * 3600.0) * 1e6
}

/// The latest plan in the store, read as the planner's type.
async fn stored_plan(store: &dyn Store) -> Plan {
    let workload = store
        .find_workload_by_name(&seed::example_workload().name)
        .await
        .unwrap()
        .expect("the example workload");
    let row = store
        .latest_plan_for_workload(workload.id)
        .await
        .unwrap()
        .expect("a plan");
    serde_json::from_value(row.plan).expect("a planner plan")
}

/// A fresh SQLite store in a temporary folder (kept alive by the returned guard).
async fn empty_store() -> (tempfile::TempDir, Arc<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store = store::open(&store::sqlite_url(&dir.path().join("strata.db")))
        .await
        .unwrap();
    (dir, store)
}

async fn seeded() -> (tempfile::TempDir, Arc<dyn Store>, seed::Seeded) {
    let (dir, store) = empty_store().await;
    let ids = seed::demo(&*store).await;
    (dir, store, ids)
}

/// GETs `uri`, returning the status, content type and body.
async fn get(app: &Router, uri: &str) -> (StatusCode, String, String) {
    let response = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

async fn get_json(app: &Router, uri: &str) -> (StatusCode, Value) {
    let (status, content_type, body) = get(app, uri).await;
    assert!(
        content_type.starts_with("application/json"),
        "{uri}: {content_type}"
    );
    (status, serde_json::from_str(&body).unwrap())
}

#[track_caller]
fn assert_contains(body: &str, needles: &[&str]) {
    for needle in needles {
        assert!(body.contains(needle), "missing {needle:?} in:\n{body}");
    }
}

#[tokio::test]
async fn configs_page_shows_every_config_with_costs_and_the_pareto_chart() {
    let (_dir, store, _) = seeded().await;
    let app = strata_web::dashboard::router(store);
    let (status, content_type, body) = get(&app, "/configs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(content_type.starts_with("text/html"));
    assert_contains(
        &body,
        &[
            "id=\"configs-table\"",
            "smollm2-135m-instruct",
            "q8_0",
            "q4_1",
            "interleave",
            "2.25 req/s",
            "+0.060",
            "98.5%",
            "id=\"pareto-chart\"",
            "<svg",
            "Pareto frontier",
            "GPU endpoint",
            "c4-standard-8",
            "g2-standard-8",
            "4 configs",
        ],
    );
    // The host has 16 hardware threads: configs are costed on c4-standard-16, q8_0's 8 threads
    // carried over per core (x2), at its output rate at its capacity (2.25 req/s, between the curve's
    // 250 tok/s at 2 and 290 at 3: 260 tok/s): 260 tok/s x 2 on $0.79068/h.
    let q8_usd = format!(
        "${:.2}",
        per_million(on_demand_price("c4-standard-16"), 520.0)
    );
    assert_contains(
        &body,
        &[
            "CPU configs of host",
            "c4-standard-16 (16 vCPUs",
            "the type with its vCPUs",
            "at its capacity within the SLA",
            &q8_usd,
        ],
    );
    // Cheapest first: the GPU endpoint (2500 tok/s on the cheapest GPU type, g2-standard-4) leads.
    let gpu = body
        .find(&format!(
            "${:.2}",
            per_million(on_demand_price("g2-standard-4"), 2500.0)
        ))
        .unwrap();
    let q8 = body.find(&q8_usd).unwrap();
    assert!(gpu < q8);
    // The example workload's GPU baseline is a labelled point of its own.
    assert_contains(
        &body,
        &[
            "GPU baseline g2-standard-8",
            "id=\"gpu-baseline\"",
            "GPU baseline of workload smol-support: g2-standard-8",
        ],
    );
    assert!(!body.contains("class=\"empty\""));
    // Endpoints measured from outside are listed apart from the configs.
    assert_contains(
        &body,
        &[
            "id=\"endpoints-table\"",
            "http://gpu-l4.internal:8000",
            "240 (2 failed)",
            "2410.5",
            "98.8%",
        ],
    );
}

#[tokio::test]
async fn configs_api_filters_sorts_and_prices_by_query() {
    let (_dir, store, ids) = seeded().await;
    let app = strata_web::dashboard::router(store);
    let (status, json) = get_json(&app, "/api/configs?sort=output_tokens_per_s&dir=asc").await;
    assert_eq!(status, StatusCode::OK);
    let rows = json["rows"].as_array().unwrap();
    let rates: Vec<f64> = rows
        .iter()
        .map(|r| r["output_tokens_per_s"].as_f64().unwrap())
        .collect();
    assert_eq!(rates, vec![120.0, 300.0, 380.0, 2500.0]);
    let q8 = rows.iter().find(|r| r["weight_type"] == "q8_0").unwrap();
    assert_eq!(q8["run_id"], ids.q8_run.0);
    assert_eq!(q8["run_count"], 2);
    assert_eq!(q8["gpu"], false);
    let gpu = rows.iter().find(|r| r["run_id"] == ids.gpu_run.0).unwrap();
    assert_eq!(gpu["gpu"], true);
    assert_eq!(gpu["pareto"], true);

    let (_, json) = get_json(&app, "/api/configs?weights=q4_1").await;
    assert_eq!(json["rows"].as_array().unwrap().len(), 1);
    let (_, json) = get_json(&app, "/api/configs?threads=8&numa=none&sort=ttft_p99").await;
    let weights: Vec<&str> = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["weight_type"].as_str().unwrap())
        .collect();
    assert_eq!(weights, vec!["q8_0", "f32"]);
    let (_, json) = get_json(&app, "/api/configs?limit=1&sort=cost&dir=desc").await;
    assert_eq!(json["rows"][0]["weight_type"], "f32");
    assert_eq!(json["rows"].as_array().unwrap().len(), 1);

    // Spot against on-demand as the builtin catalog has them for c4-standard-16.
    let c4 = Catalog::builtin().find("c4-standard-16").cloned().unwrap();
    let spot_ratio = c4.spot_per_hour.unwrap() / c4.on_demand_per_hour;
    let (_, on_demand) = get_json(&app, "/api/configs?weights=q8_0").await;
    let (_, spot) = get_json(&app, "/api/configs?weights=q8_0&price=spot").await;
    let cost = |j: &Value| {
        j["rows"][0]["usd_per_million_output_tokens"]
            .as_f64()
            .unwrap()
    };
    assert!((cost(&spot) / cost(&on_demand) - spot_ratio).abs() < 1e-9);
    assert_eq!(spot["query"]["price"], "spot");
    assert_eq!(spot["pricing"]["cpu_instance"], Value::Null);
    let host = &spot["pricing"]["hosts"][0];
    assert_eq!(host["instance"]["name"], "c4-standard-16");
    assert_eq!(host["exact"], true);
    assert_eq!(
        host["instance"]["source"].as_str().map(str::is_empty),
        Some(false)
    );
    assert_eq!(spot["rows"][0]["instance"], "c4-standard-16");
    assert_eq!(spot["rows"][0]["scaling"]["rule"], "per_core");
    assert_eq!(spot["rows"][0]["scaling"]["factor"], 2.0);
    assert_eq!(spot["rows"][0]["cost_basis"], "capacity");
    assert_eq!(spot["rows"][0]["costed_output_tokens_per_s"], 260.0);

    // A chosen instance type costs every CPU config, scaled from the host by its vCPUs.
    let (_, chosen) = get_json(&app, "/api/configs?weights=q8_0&instance=c4-standard-8").await;
    let expected = per_million(on_demand_price("c4-standard-8"), 260.0);
    assert!((cost(&chosen) - expected).abs() < 1e-9, "{chosen}");
    assert_eq!(chosen["pricing"]["cpu_instance"]["name"], "c4-standard-8");

    // Every row is priced, some are on the frontier, and the GPU baseline is its own point:
    // g2-standard-8 at 2000 tok/s, TTFT 250 ms + 12 ms for each further token of the example's mean
    // request (0.6 x 28 + 0.4 x 12 = 21.6 output tokens).
    let (_, all) = get_json(&app, "/api/configs").await;
    let rows = all["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| r["usd_per_million_output_tokens"].is_number())
    );
    assert!(rows.iter().any(|r| r["pareto"] == true));
    let baseline = &all["gpu_baseline"];
    assert_eq!(baseline["name"], "g2-standard-8");
    assert_eq!(baseline["workload"], "smol-support");
    let usd = baseline["usd_per_million_output_tokens"].as_f64().unwrap();
    assert!(
        (usd - per_million(on_demand_price("g2-standard-8"), 2000.0)).abs() < 1e-9,
        "{usd}"
    );
    let e2e = baseline["e2e_p99_ms"].as_f64().unwrap();
    assert!((e2e - (250.0 + 12.0 * 20.6)).abs() < 1e-6, "{e2e}");

    // The page keeps filters in its sort links (shareable).
    let (_, _, body) = get(&app, "/configs?model=smollm2-135m-instruct&sort=e2e_p99").await;
    assert_contains(
        &body,
        &["href=\"/configs?dir=desc&#38;model=smollm2-135m-instruct&#38;sort=e2e_p99\""],
    );
}

#[tokio::test]
async fn bad_query_values_are_400_with_the_reason() {
    let (_dir, store, _) = seeded().await;
    let app = strata_web::dashboard::router(store);
    for (uri, message) in [
        (
            "/api/configs?sort=price",
            "query parameter sort: unknown sort key \"price\"",
        ),
        (
            "/api/configs?dir=sideways",
            "query parameter dir: \"sideways\" is not asc or desc",
        ),
        ("/api/configs?limit=100000", "query parameter limit"),
        ("/api/configs?threads=-1", "query parameter threads"),
        (
            "/api/configs?price=reserved",
            "query parameter price: unknown price model",
        ),
        (
            "/api/configs?instance=m9.huge",
            "query parameter instance: no recorded price for instance type \"m9.huge\"",
        ),
        ("/api/gateway?window=0", "query parameter window"),
        (
            "/api/runs/abc",
            "query parameter id: \"abc\" is not a run id",
        ),
    ] {
        let (status, json) = get_json(&app, uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
        let got = json["error"]["message"].as_str().unwrap();
        assert!(got.starts_with(message), "{uri}: {got}");
        assert_eq!(json["error"]["type"], "invalid_request_error");
    }
    let (status, _, body) = get(&app, "/configs?sort=price").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_contains(
        &body,
        &["id=\"error-message\"", "unknown sort key &#34;price&#34;"],
    );
    let (status, json) = get_json(&app, "/api/runs/999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(json["error"]["code"], "not_found");
    let (status, _, _) = get(&app, "/runs/999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get(&app, "/nowhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, json) = get_json(&app, "/api/nowhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        json["error"]["code"], "not_found",
        "an unknown API path answers JSON"
    );
}

#[tokio::test]
async fn run_page_has_latency_capacity_quality_and_hardware() {
    let (_dir, store, ids) = seeded().await;
    let app = strata_web::dashboard::router(store);
    let (status, _, body) = get(&app, &format!("/runs/{}", ids.q8_run)).await;
    assert_eq!(status, StatusCode::OK);
    assert_contains(
        &body,
        &[
            "id=\"latency-chart\"",
            "id=\"latency-table\"",
            "id=\"capacity-latency-chart\"",
            "id=\"capacity-throughput-chart\"",
            "Sustains 2.25 requests/s",
            "id=\"quality-table\"",
            "wiki-2k",
            "98.5%",
            "Intel Xeon Platinum 8581C",
            "avx512_vnni",
            "fp-demo",
            // The host's caches.
            "48 KiB / 2.0 MiB / 260.0 MiB",
        ],
    );
    assert!(body.matches("<svg").count() >= 3);

    let (status, json) = get_json(&app, &format!("/api/runs/{}", ids.q8_run)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["run"]["ttft_p99_ms"], 260.0);
    assert_eq!(json["model"]["name"], "smollm2-135m-instruct");
    assert_eq!(json["load_curve"].as_array().unwrap().len(), 4);
    assert_eq!(json["load_curve"][0]["rate_rps"], 0.5);
    assert_eq!(json["load_curve"][3]["e2e_p99_ms"], 19000.0);
    assert_eq!(json["load_curve_problem"], Value::Null);
    assert_eq!(json["capacity"]["max_requests_per_s"], 2.25);
    assert_eq!(json["sibling_runs"].as_array().unwrap().len(), 1);

    // The GPU run has no capacity result: an empty state, not an error.
    let (status, _, body) = get(&app, &format!("/runs/{}", ids.gpu_run)).await;
    assert_eq!(status, StatusCode::OK);
    assert_contains(&body, &["id=\"empty-capacity\""]);
}

#[tokio::test]
async fn plans_pilots_and_gateway_pages_and_api() {
    let (_dir, store, _) = seeded().await;
    let app = strata_web::dashboard::router(store.clone());

    let plan = stored_plan(&*store).await;
    let (status, _, body) = get(&app, "/plans").await;
    assert_eq!(status, StatusCode::OK);
    assert_contains(
        &body,
        &[
            "smol-support",
            &format!("{} on {}", plan.chosen.config, plan.chosen.instance_type),
            &format!("${:.2}", plan.totals.cost_per_day),
            &format!("${:.2}", plan.totals.all_gpu_cost_per_day),
            "class=\"chart plan-chart\"",
            "<svg",
            "GPU share",
        ],
    );
    assert!(!body.contains("plan-problem"), "{body}");
    let (_, json) = get_json(&app, "/api/plans").await;
    let hours = json["plans"][0]["hours"].as_array().unwrap();
    assert_eq!(hours.len(), 24);
    for (shown, planned) in hours.iter().zip(&plan.hours) {
        assert_eq!(shown["cpu_instances"], planned.cpu_instances);
        assert_eq!(
            shown["classes"].as_array().unwrap().len(),
            planned.classes.len()
        );
    }
    assert_eq!(
        json["plans"][0]["all_gpu_cost_usd"],
        plan.totals.all_gpu_cost_per_day
    );

    // The pilots, as `strata pilot` records them: its own report type, read back with it.
    let (_, json) = get_json(&app, "/api/pilots").await;
    assert_eq!(json["pilots"].as_array().unwrap().len(), 3);
    let done = &json["pilots"][0]["detail"];
    let kind = done["verdict"].as_str().unwrap().to_owned();
    assert!(
        ["migrate", "partial", "stay"].contains(&kind.as_str()),
        "{kind}"
    );
    assert_eq!(
        done["decision"]["classes"].as_array().unwrap().len(),
        seed::example_workload().classes.len()
    );
    assert_eq!(done["plan"]["config"], plan.chosen.config.as_str());
    assert_eq!(
        json["pilots"][2]["error"],
        "profiling q8_0 t8 b8: the engine exited"
    );
    assert!(
        json["pilots"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["problem"].is_null())
    );
    let (status, _, body) = get(&app, "/pilots").await;
    assert_eq!(status, StatusCode::OK);
    assert_contains(
        &body,
        &[
            "id=\"pilots-table\"",
            "<strong>Failed:</strong> profiling q8_0 t8 b8: the engine exited",
            "pending",
            "none yet",
            &format!("class=\"verdict verdict-{kind}\""),
            &format!("(exit {})", done["exit_code"]),
            "class=\"pilot-classes\"",
            "class=\"pilot-quality\"",
            "20.8% above f32",
            "+0.4%",
            // q8_0 loses one of the 24 tasks f32 answers: the paired test cannot tell.
            "21/24 (1 lost, 0 gained, p = 0.500)",
            "tasks: not enough tasks to tell: loses 1 and gains 0 of 24 tasks against f32",
            "class=\"pilot-replay\"",
            "-8.1%",
            "Largest p99 E2E error: 8.3%",
            "61.6 output tokens/s when profiled, 55.8 right before the replay, 61.4 right after (95% of",
            "Calibration: 84 requests over 80 s through the gateway, half right before the replay and half \
             right after it, ran the engine&#39;s decode steps at 1.07x and its prompts at 1.18x of the \
             profile&#39;s step model",
            "the prediction runs on the profile&#39;s steps scaled by these ratios. The prediction is the \
             median of 15 simulations with the engine&#39;s pace spread by 2.4% (the samples&#39; 10 s blocks \
             moved by 2.4%), for a whole run and afresh every 10 s",
            "3.00 (2.80-3.20)",
            "all requests",
            "-9.1%",
            "abc123",
        ],
    );
    assert!(!body.contains("pilot-problem"), "{body}");

    let (status, _, body) = get(&app, "/gateway").await;
    assert_eq!(status, StatusCode::OK);
    assert_contains(
        &body,
        &[
            "id=\"traffic-table\"",
            "cpu-a",
            "gpu-l4",
            "breaker_open",
            "$4.50",
            "$40.00 (smol-support)",
            "setInterval",
            "id=\"sources\"",
            "pilot:smol-support",
            "id=\"predictions-table\"",
            "<td>20.0%</td><td>10.0%</td>",
            "E2E, no later arrival</td><td>24</td><td>—</td><td>10.0%</td>",
            "id=\"calibration-chart\"",
            "observed = predicted",
        ],
    );
    let (_, json) = get_json(&app, "/api/gateway?window=60").await;
    // Every seeded request was predicted at 0.9 (0.8 raw) of its observed E2E and at 0.2 (0.15 raw)
    // against 0.21 of it for its first token.
    let cpu = json["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == "cpu-a")
        .unwrap();
    let close = |v: &Value, x: f64| (v.as_f64().unwrap() - x).abs() < 1e-9;
    assert!(close(&cpu["e2e"]["corrected"]["mape"], 0.1), "{cpu}");
    assert!(close(&cpu["e2e"]["raw"]["mape"], 0.2), "{cpu}");
    assert!(close(&cpu["e2e"]["corrected"]["bias"], -0.1), "{cpu}");
    assert!(
        close(&cpu["ttft"]["corrected"]["p90"], 0.01 / 0.21),
        "{cpu}"
    );
    assert!(close(&cpu["ttft"]["raw"]["mape"], 0.06 / 0.21), "{cpu}");
    // The seeded CPU requests come 10 s apart and end within 4 s: no later one met any of them.
    assert_eq!(cpu["e2e_by_later"]["none"]["requests"], 24, "{cpu}");
    assert!(close(&cpu["e2e_by_later"]["none"]["mape"], 0.1), "{cpu}");
    assert!(cpu["e2e_by_later"]["some"].is_null(), "{cpu}");
    assert_eq!(json["calibration"].as_array().unwrap().len(), 48);
    assert_eq!(json["requests"], 48);
    assert_eq!(json["spend"]["today_usd"], 4.5);
    assert_eq!(json["sources"][0]["source"], "live");
    assert_eq!(json["sources"][0]["requests"], 40);
    assert_eq!(json["sources"][1]["source"], "pilot:smol-support");
    assert_eq!(json["sources"][1]["requests"], 8);
    let traffic = json["traffic"].as_array().unwrap();
    let chat = traffic
        .iter()
        .find(|t| t["source"] == "live" && t["pool"] == "cpu-a" && t["class"] == "chat")
        .unwrap();
    assert_eq!(chat["requests"], 10);
    // The example workload's chat class: E2E p99 within 10 s.
    assert_eq!(chat["sla_ms"], 10000.0);
    assert_eq!(chat["sla_attainment"], 1.0);
    // The replay is shown apart from live traffic, and on its own when filtered.
    let (_, replay) = get_json(&app, "/api/gateway?source=pilot:smol-support").await;
    assert_eq!(replay["requests"], 8);
    assert!(
        replay["traffic"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["source"] == "pilot:smol-support")
    );
    let (_, live) = get_json(&app, "/api/gateway?source=live").await;
    assert_eq!(live["requests"], 40);
    let (_, _, body) = get(&app, "/gateway?source=pilot:smol-support").await;
    assert_contains(&body, &["<option value=\"pilot:smol-support\" selected>"]);
    assert_eq!(json["breakers"][0]["state"], "breaker_open");
}

/// A report the pilot's constructors build from a replay reads back from its JSON as the same value,
/// as a version 1 report through the migration, and from the store as the dashboard shows it.
#[tokio::test]
async fn a_replayed_pilot_report_round_trips_and_renders() {
    let (_dir, store, _) = seeded().await;
    let (workload, profiles, plan, plan_id) = seed::record_example_plan(&*store).await;
    let report = seed::replayed_pilot_report(&workload, &profiles, &plan, plan_id);
    let replay = report.replay.as_ref().expect("a replay");
    assert!(
        replay.requests > 0 && replay.all_as_profiled.is_some(),
        "{replay:?}"
    );

    let json = serde_json::to_value(&report).unwrap();
    let read: PilotReport = serde_json::from_str(&json.to_string()).unwrap();
    assert_eq!(read, report);
    assert_eq!(
        pilot::read_stored(&json).unwrap(),
        StoredReport::Done(Box::new(report.clone()))
    );
    // A report from before the host's load was measured reads with none.
    let mut older = json.clone();
    if let Some(replay) = older["replay"].as_object_mut() {
        replay.remove("host_load");
    }
    let older: PilotReport = serde_json::from_value(older).unwrap();
    assert!(replay.host_load.is_some(), "{replay:?}");
    assert_eq!(older.replay.expect("a replay").host_load, None);
    let mut v1 = json.clone();
    v1["schema_version"] = 1.into();
    assert_eq!(
        pilot::read_stored(&v1).unwrap(),
        StoredReport::Done(Box::new(report.clone()))
    );

    let workload_row = store
        .find_workload_by_name(&workload.name)
        .await
        .unwrap()
        .expect("the workload");
    let row = store.insert_pilot(workload_row.id).await.unwrap();
    let update = PilotUpdate {
        status: PilotStatus::Done,
        verdict: Some(report.summary.clone()),
        report: Some(json),
    };
    store.update_pilot(row.id, &update).await.unwrap();
    let app = strata_web::dashboard::router(store);
    let (_, pilots) = get_json(&app, "/api/pilots").await;
    let shown = pilots["pilots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == row.id.0)
        .expect("the pilot");
    let detail: PilotReport = serde_json::from_value(shown["detail"].clone()).unwrap();
    assert_eq!(detail, report);
    let (status, _, body) = get(&app, "/pilots").await;
    assert_eq!(status, StatusCode::OK);
    assert_contains(
        &body,
        &[
            &format!("id=\"pilot-{}\"", row.id.0),
            &format!("{} requests over", replay.requests),
            "class=\"pilot-replay\"",
        ],
    );
    assert!(!body.contains("pilot-problem"), "{body}");
}

#[tokio::test]
async fn empty_store_pages_say_what_fills_them() {
    let (_dir, store) = empty_store().await;
    let app = strata_web::dashboard::router(store);
    for (uri, needles) in [
        (
            "/configs",
            &["id=\"empty-configs\"", "strata profile --sweep"][..],
        ),
        ("/plans", &["id=\"empty-plans\"", "strata plan"][..]),
        ("/pilots", &["id=\"empty-pilots\"", "strata pilot"][..]),
        ("/gateway", &["id=\"empty-gateway\"", "strata gateway"][..]),
    ] {
        let (status, _, body) = get(&app, uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert_contains(&body, needles);
    }
    let (_, _, body) = get(&app, "/configs").await;
    assert_contains(&body, &["No instance prices are recorded"]);
    let (_, json) = get_json(&app, "/api/configs").await;
    assert_eq!(json["gpu_baseline"], Value::Null);
    let (_, json) = get_json(&app, "/api/configs").await;
    assert_eq!(json["rows"], Value::Array(vec![]));
    let (_, json) = get_json(&app, "/api/gateway").await;
    assert_eq!(json["requests"], 0);
    let (status, _, _) = get(&app, "/configs?model=nothing").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn root_redirects_and_openapi_lists_every_api_route() {
    let (_dir, store) = empty_store().await;
    let app = strata_web::dashboard::router(store);
    let response = app
        .clone()
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert!(response.status().is_redirection());
    assert_eq!(response.headers()[header::LOCATION], "/configs");

    let (status, json) = get_json(&app, "/api/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["openapi"], "3.1.0");
    for path in [
        "/api/configs",
        "/api/runs/{id}",
        "/api/plans",
        "/api/pilots",
        "/api/gateway",
        "/api/openapi.json",
    ] {
        assert!(json["paths"][path]["get"].is_object(), "{path}");
    }
}
