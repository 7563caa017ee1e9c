use super::*;
use crate::loadgen::{Lengths, Sla};

const SWEEP: &str = r#"
model = "smollm2-135m-instruct"
weights = ["q8_0", "q4_1", "f16"]
threads = [1, 2]
max_batch = [1, 8]

[sla]
ttft_ms = 1000.0
tpot_ms = 100.0

[[shape]]
name = "chat"
prompt_tokens = 128
output_tokens = { min = 16, max = 64 }
arrival = { kind = "closed", concurrency = 4 }
requests = 16
warmup = 2

[capacity]
ttft_p99_ms = 1000.0
tpot_p99_ms = 100.0
shape = "chat"
"#;

#[test]
fn a_sweep_expands_to_every_combination() {
    let sweep = Sweep::from_toml_str(SWEEP).expect("parses");
    let configs = sweep.configs();
    assert_eq!(configs.len(), 12);
    assert_eq!(configs[0].to_string(), "q8_0 t1 b1 kv256 numa=none");
    assert_eq!(sweep.shapes[0].prompt_tokens, Lengths::Fixed(128));
    assert_eq!(
        sweep.shapes[0].output_tokens,
        Lengths::Uniform { min: 16, max: 64 }
    );
    let capacity = sweep.capacity.expect("capacity");
    assert_eq!((capacity.probe_requests, capacity.confirmations), (24, 2));
}

#[test]
fn a_shape_may_run_for_a_duration_and_keeps_it_in_its_identity() {
    let text = SWEEP.replace("requests = 16", "duration_s = 30.0");
    let sweep = Sweep::from_toml_str(&text).expect("parses");
    let shape = &sweep.shapes[0];
    assert_eq!((shape.requests, shape.duration_s), (0, Some(30.0)));
    let identity = shape_json(shape, &sweep.sla);
    assert_eq!(identity["duration_s"], 30.0);
    let counted = Sweep::from_toml_str(SWEEP).expect("parses");
    let identity = shape_json(&counted.shapes[0], &counted.sla);
    assert!(identity.get("duration_s").is_none(), "{identity}");
    assert_eq!(
        load_spec("http://127.0.0.1:1", shape, Sla::default(), 1)
            .shape
            .duration_s,
        Some(30.0)
    );
}

#[test]
fn bad_sweeps_name_the_key() {
    let cases = [
        (SWEEP.replace("\"f16\"", "\"q3_k\""), "weights"),
        (
            SWEEP.replace("threads = [1, 2]", "threads = [0]"),
            "threads",
        ),
        (
            SWEEP.replace("shape = \"chat\"", "shape = \"nope\""),
            "capacity.shape",
        ),
        (SWEEP.replace("max_batch", "max_bach"), "max_bach"),
        (
            SWEEP.replace("requests = 16", "requests = \"many\""),
            "requests",
        ),
        (format!("numa = [\"spread\"]\n{SWEEP}"), "numa"),
        (SWEEP.replace("requests = 16", "requests = 0"), "duration_s"),
        (
            SWEEP.replace("requests = 16", "duration_s = -3.0"),
            "duration_s must be a positive",
        ),
    ];
    for (text, key) in cases {
        let err = Sweep::from_toml_str(&text).expect_err(key).to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
}
