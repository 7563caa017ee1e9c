//! The `--baseline` argument: the GPU the pilot's savings are measured against.

use crate::catalog::{Catalog, TokenPricedEndpoint};
use crate::error::{Result, invalid};
use crate::workload::{GpuFallbackSpec, Workload};

/// The GPU baseline from `--baseline`: a catalog GPU instance type or token-priced endpoint by name, or a
/// price per million tokens written `X/1M` (prompt and output alike) or `IN:OUT/1M`, which is added to
/// `catalog` as the endpoint `baseline`. Latency (and an instance's throughput) come from the workload's
/// `[gpu_fallback]`, which must then exist for a price or an endpoint with no figures of its own.
///
/// # Errors
/// [`crate::PlannerError::InvalidField`] naming what is wrong with the value.
pub fn baseline(arg: &str, workload: &Workload, catalog: &mut Catalog) -> Result<GpuFallbackSpec> {
    let bad = |problem: String| Err(invalid("baseline", arg, "--baseline", problem));
    let latency = match &workload.gpu_fallback {
        Some(GpuFallbackSpec::Instance {
            ttft_p99_s,
            tpot_p99_s,
            basis,
            output_tokens_per_s,
            ..
        }) => Some((
            *ttft_p99_s,
            *tpot_p99_s,
            basis.clone(),
            Some(*output_tokens_per_s),
        )),
        Some(GpuFallbackSpec::PerToken {
            ttft_p99_s,
            tpot_p99_s,
            basis,
            ..
        }) => Some((*ttft_p99_s, *tpot_p99_s, basis.clone(), None)),
        None => None,
    };
    let Some((ttft_p99_s, tpot_p99_s, basis, throughput)) = latency else {
        return bad(format!(
            "workload `{}` has no [gpu_fallback] giving the GPU's latency; add one",
            workload.name
        ));
    };
    if let Some(price) = arg.trim().strip_suffix("/1M") {
        let parse = |x: &str| x.trim().trim_start_matches('$').parse::<f64>().ok();
        let (input, output) = match price.split_once(':') {
            Some((i, o)) => (parse(i), parse(o)),
            None => (parse(price), parse(price)),
        };
        let (Some(input_per_million), Some(output_per_million)) = (input, output) else {
            return bad("write a price as X/1M or IN:OUT/1M, in $ per million tokens".into());
        };
        if !(input_per_million >= 0.0 && output_per_million >= 0.0) {
            return bad("prices must be 0 or more".into());
        }
        catalog.merge(Catalog {
            instances: Vec::new(),
            token_priced: vec![TokenPricedEndpoint {
                provider: "command line".into(),
                name: "baseline".into(),
                input_per_million,
                output_per_million,
                source: "--baseline".into(),
                price_date: "given".into(),
            }],
        });
        return Ok(GpuFallbackSpec::PerToken {
            endpoint: "baseline".into(),
            ttft_p99_s,
            tpot_p99_s,
            basis,
        });
    }
    if catalog.find_endpoint(arg).is_some() {
        return Ok(GpuFallbackSpec::PerToken {
            endpoint: arg.to_owned(),
            ttft_p99_s,
            tpot_p99_s,
            basis,
        });
    }
    match catalog.find(arg) {
        Some(inst) if inst.is_gpu() => {
            let Some(output_tokens_per_s) = throughput else {
                return bad(format!(
                    "the workload's [gpu_fallback] is per token, so it gives no throughput for instance `{arg}`"
                ));
            };
            Ok(GpuFallbackSpec::Instance {
                instance: arg.to_owned(),
                region: None,
                output_tokens_per_s,
                ttft_p99_s,
                tpot_p99_s,
                basis,
            })
        }
        Some(_) => bad(format!(
            "`{arg}` is a CPU instance type, not a GPU baseline"
        )),
        None => bad(format!(
            "`{arg}` is neither a catalog GPU instance type or endpoint nor a price like 0.20/1M"
        )),
    }
}
