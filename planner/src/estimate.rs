//! Estimates for what was not measured (e.g. a 7B model on a C4 instance): a roofline calibrated on a
//! measured profile and its host's fingerprint. Decode is taken as memory-bound (weights read once per
//! token), prefill as int8-compute-bound; the measured efficiencies carry over. Results are always
//! labelled [`Provenance::Estimated`].

use serde::{Deserialize, Serialize};

use crate::error::{Result, invalid, positive};
use crate::profile::{ConfigProfile, LoadPoint, MeasuredOn, Provenance};

/// Size of a model as the roofline sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelShape {
    /// Model name.
    pub name: String,
    /// Parameters.
    pub params: f64,
    /// Bytes of weights read per generated token (the file's tensor bytes for the chosen format).
    pub weight_bytes: f64,
}

/// Hardware figures of a target machine (from a fingerprint or a datasheet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Catalog instance type (or host) name.
    pub name: String,
    /// vCPUs.
    pub vcpus: u32,
    /// Sustained memory bandwidth, GB/s.
    pub mem_bandwidth_gbs: f64,
    /// Int8 throughput, GOPS.
    pub int8_gops: f64,
}

/// Measured share of each roofline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Decode tokens/s over bandwidth / weight bytes.
    pub decode_bandwidth_efficiency: f64,
    /// Prefill tokens/s over int8 ops/s / (2 x params).
    pub prefill_compute_efficiency: f64,
}

/// Calibrates on `measured` (a profile of `model`): decode speed from the lightest load point's TPOT,
/// prefill speed from [`ConfigProfile::prefill_rate`].
///
/// # Errors
/// [`crate::PlannerError::InvalidField`] when the fingerprint or model sizes are not positive.
pub fn calibrate(measured: &ConfigProfile, model: &ModelShape) -> Result<Calibration> {
    let m = &measured.measured_on;
    positive(
        "estimate",
        &measured.id,
        "measured_on.mem_bandwidth_gbs",
        m.mem_bandwidth_gbs,
    )?;
    positive(
        "estimate",
        &measured.id,
        "measured_on.int8_gops",
        m.int8_gops,
    )?;
    positive("estimate", &model.name, "params", model.params)?;
    positive("estimate", &model.name, "weight_bytes", model.weight_bytes)?;
    let tpot0 = measured
        .load_curve
        .first()
        .map(|p| p.tpot_p99_s)
        .ok_or_else(|| invalid("estimate", &measured.id, "load_curve", "is empty".into()))?;
    let decode_roof = m.mem_bandwidth_gbs * 1e9 / model.weight_bytes;
    let prefill_roof = m.int8_gops * 1e9 / (2.0 * model.params);
    Ok(Calibration {
        decode_bandwidth_efficiency: (1.0 / tpot0) / decode_roof,
        prefill_compute_efficiency: measured.prefill_rate() / prefill_roof,
    })
}

/// Estimates `target_model` on `target` from `measured` (a profile of `measured_model`): TPOT and prefill
/// scale with the rooflines at the measured efficiencies, request rates with the mean service time, and
/// the result is labelled as an estimate.
///
/// # Errors
/// As [`calibrate`], and when the target's figures are not positive.
pub fn estimate_profile(
    measured: &ConfigProfile,
    measured_model: &ModelShape,
    target_model: &ModelShape,
    target: &Fingerprint,
) -> Result<ConfigProfile> {
    let cal = calibrate(measured, measured_model)?;
    positive(
        "estimate",
        &target.name,
        "mem_bandwidth_gbs",
        target.mem_bandwidth_gbs,
    )?;
    positive("estimate", &target.name, "int8_gops", target.int8_gops)?;
    positive(
        "estimate",
        &target_model.name,
        "params",
        target_model.params,
    )?;
    positive(
        "estimate",
        &target_model.name,
        "weight_bytes",
        target_model.weight_bytes,
    )?;
    let tpot0 = measured.load_curve.first().map_or(0.0, |p| p.tpot_p99_s);
    let tpot_new = target_model.weight_bytes
        / (target.mem_bandwidth_gbs * 1e9 * cal.decode_bandwidth_efficiency);
    let prefill_new =
        cal.prefill_compute_efficiency * target.int8_gops * 1e9 / (2.0 * target_model.params);
    let decode_ratio = tpot_new / tpot0;
    let prefill_ratio = measured.prefill_rate() / prefill_new;
    let (p, o) = (measured.mean_prompt_tokens, measured.mean_output_tokens);
    let service_old = p / measured.prefill_rate() + o * tpot0;
    let service_new = p / prefill_new + o * tpot_new;
    let speed = service_old / service_new;
    let curve = measured
        .load_curve
        .iter()
        .map(|l| {
            let ttft = l.ttft_p99_s * prefill_ratio;
            LoadPoint {
                rate_rps: l.rate_rps * speed,
                ttft_p99_s: ttft,
                tpot_p99_s: l.tpot_p99_s * decode_ratio,
                e2e_p99_s: ttft + (l.e2e_p99_s - l.ttft_p99_s).max(0.0) * decode_ratio,
                output_tokens_per_s: l.output_tokens_per_s * speed,
                total_tokens_per_s: l.total_tokens_per_s * speed,
                ttft_p50_s: l.ttft_p50_s.map(|t| t * prefill_ratio),
                tpot_p50_s: l.tpot_p50_s.map(|t| t * decode_ratio),
            }
        })
        .collect();
    let basis = format!(
        "roofline from {} on {}: decode at {:.0}% of memory bandwidth, prefill at {:.0}% of int8 peak; \
         {} ({:.2} GB) on {} ({:.0} GB/s, {:.0} GOPS)",
        measured.id,
        measured.measured_on.host,
        cal.decode_bandwidth_efficiency * 100.0,
        cal.prefill_compute_efficiency * 100.0,
        target_model.name,
        target_model.weight_bytes / 1e9,
        target.name,
        target.mem_bandwidth_gbs,
        target.int8_gops
    );
    Ok(ConfigProfile {
        id: format!("{}@{}~{}", target_model.name, target.name, measured.id),
        model: target_model.name.clone(),
        weights: measured.weights.clone(),
        threads: target.vcpus,
        max_batch: measured.max_batch,
        measured_on: MeasuredOn {
            host: format!("estimate:{}", target.name),
            instance_type: Some(target.name.clone()),
            vcpus: target.vcpus,
            mem_bandwidth_gbs: target.mem_bandwidth_gbs,
            int8_gops: target.int8_gops,
        },
        load_curve: curve,
        mean_prompt_tokens: p,
        mean_output_tokens: o,
        prompt_token_weight: measured.prompt_token_weight,
        prefill_tokens_per_s: Some(prefill_new),
        // Steps timed on the measured host say nothing of the target's.
        step_model: None,
        provenance: Provenance::Estimated { basis },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::smol;

    fn smol_shape() -> ModelShape {
        ModelShape {
            name: "SmolLM2-135M".into(),
            params: 134.5e6,
            weight_bytes: 143.0e6,
        }
    }

    #[test]
    fn calibration_recovers_the_measured_speeds() {
        let p = smol();
        let cal = calibrate(&p, &smol_shape()).expect("calibrates");
        // 1 / 0.009 s = 111 tok/s against 29e9 / 143e6 = 203 tok/s.
        assert!((cal.decode_bandwidth_efficiency - (1.0 / 0.009) / (29e9 / 143e6)).abs() < 1e-9);
        let same = estimate_profile(
            &p,
            &smol_shape(),
            &smol_shape(),
            &Fingerprint {
                name: "same".into(),
                vcpus: 2,
                mem_bandwidth_gbs: 29.0,
                int8_gops: 400.0,
            },
        )
        .expect("estimate");
        for (a, b) in same.load_curve.iter().zip(&p.load_curve) {
            assert!(
                (a.rate_rps - b.rate_rps).abs() < 1e-9
                    && (a.tpot_p99_s - b.tpot_p99_s).abs() < 1e-12
            );
        }
    }

    #[test]
    fn a_7b_model_on_c4_is_slower_and_labelled() {
        let p = smol();
        let seven = ModelShape {
            name: "7B-q8_0".into(),
            params: 7.0e9,
            weight_bytes: 7.5e9,
        };
        let c4 = Fingerprint {
            name: "c4-standard-8".into(),
            vcpus: 8,
            mem_bandwidth_gbs: 60.0,
            int8_gops: 1600.0,
        };
        let e = estimate_profile(&p, &smol_shape(), &seven, &c4).expect("estimate");
        assert!(e.provenance.is_estimate());
        let tpot = e.load_curve[0].tpot_p99_s;
        let cal = calibrate(&p, &smol_shape()).expect("cal");
        assert!((tpot - 7.5e9 / (60e9 * cal.decode_bandwidth_efficiency)).abs() < 1e-12);
        assert!(e.max_rate() < p.max_rate());
        e.validate().expect("estimate is a valid profile");
    }
}
