//! What the CPU can do, and which kernel tier runs on it.
//!
//! Features are detected once per process (`is_x86_feature_detected!`, which checks both CPUID and
//! that the OS saves the wider registers). The tier is chosen once too: the best one the CPU supports,
//! unless [`ENV_ISA`] forces one. Forcing a tier the CPU lacks, or naming an unknown one, is an
//! [`IsaError`] from [`tier`]; callers that validate at startup (engine load) report it there. The
//! kernel table ([`super::dispatch::table`]) never fails: on such an error it logs one warning and runs
//! the best supported tier.

use std::{fmt, str::FromStr, sync::OnceLock};

/// Environment variable that forces a kernel tier: `scalar`, `avx2`, `avx512` or `auto`.
pub const ENV_ISA: &str = "STRATA_ISA";

/// CPU features the kernels care about, as detected at run time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    /// AVX2 integer and float vectors.
    pub avx2: bool,
    /// Fused multiply-add.
    pub fma: bool,
    /// f16 <-> f32 conversion (`vcvtph2ps`).
    pub f16c: bool,
    /// AVX-512 Foundation.
    pub avx512f: bool,
    /// AVX-512 byte and word instructions.
    pub avx512bw: bool,
    /// AVX-512 on 128- and 256-bit registers.
    pub avx512vl: bool,
    /// AVX-512 int8 dot products (`vpdpbusd`).
    pub avx512vnni: bool,
    /// AVX-512 bf16 dot products (`vdpbf16ps`).
    pub avx512bf16: bool,
}

impl CpuFeatures {
    /// This CPU's features, detected on first use.
    pub fn get() -> &'static CpuFeatures {
        static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
        FEATURES.get_or_init(Self::detect)
    }

    #[cfg(target_arch = "x86_64")]
    fn detect() -> Self {
        Self {
            avx2: is_x86_feature_detected!("avx2"),
            fma: is_x86_feature_detected!("fma"),
            f16c: is_x86_feature_detected!("f16c"),
            avx512f: is_x86_feature_detected!("avx512f"),
            avx512bw: is_x86_feature_detected!("avx512bw"),
            avx512vl: is_x86_feature_detected!("avx512vl"),
            avx512vnni: is_x86_feature_detected!("avx512vnni"),
            avx512bf16: is_x86_feature_detected!("avx512bf16"),
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn detect() -> Self {
        Self::default()
    }

    /// The features `tier` needs that this CPU lacks (empty when it can run `tier`).
    pub fn missing(&self, tier: KernelTier) -> Vec<&'static str> {
        let needed: &[(&str, bool)] = match tier {
            KernelTier::Scalar => &[],
            KernelTier::Avx2 => &[("avx2", self.avx2), ("fma", self.fma), ("f16c", self.f16c)],
            KernelTier::Avx512 => &[
                ("avx2", self.avx2),
                ("fma", self.fma),
                ("f16c", self.f16c),
                ("avx512f", self.avx512f),
                ("avx512bw", self.avx512bw),
                ("avx512vl", self.avx512vl),
                ("avx512vnni", self.avx512vnni),
            ],
        };
        if !cfg!(target_arch = "x86_64") && tier != KernelTier::Scalar {
            return vec!["x86_64"];
        }
        needed
            .iter()
            .filter(|(_, has)| !has)
            .map(|(name, _)| *name)
            .collect()
    }

    /// Whether this CPU can run `tier`.
    pub fn supports(&self, tier: KernelTier) -> bool {
        self.missing(tier).is_empty()
    }

    /// The fastest tier this CPU supports.
    pub fn best_tier(&self) -> KernelTier {
        KernelTier::ALL
            .into_iter()
            .rev()
            .find(|&t| self.supports(t))
            .unwrap_or(KernelTier::Scalar)
    }
}

/// A family of kernels, each needing a set of CPU features. Ordered from slowest to fastest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelTier {
    /// Plain Rust: the reference every other tier is tested against.
    Scalar,
    /// AVX2 + FMA + F16C (int8 products through `vpmaddubsw`).
    Avx2,
    /// AVX2 + FMA + F16C + AVX-512 F/BW/VL/VNNI (int8 products through `vpdpbusd`).
    Avx512,
}

impl KernelTier {
    /// Every tier, slowest first.
    pub const ALL: [KernelTier; 3] = [KernelTier::Scalar, KernelTier::Avx2, KernelTier::Avx512];

    /// The tier's name as [`ENV_ISA`] spells it and as profiles record it.
    pub fn name(self) -> &'static str {
        match self {
            KernelTier::Scalar => "scalar",
            KernelTier::Avx2 => "avx2",
            KernelTier::Avx512 => "avx512",
        }
    }
}

impl fmt::Display for KernelTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KernelTier {
    type Err = IsaError;

    /// Parses a tier name, ignoring case and surrounding blanks.
    fn from_str(s: &str) -> Result<Self, IsaError> {
        let wanted = s.trim();
        KernelTier::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| IsaError::Unknown {
                value: s.to_owned(),
            })
    }
}

/// Why the kernel tier asked for through [`ENV_ISA`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IsaError {
    /// The value names no tier.
    #[error("{ENV_ISA}={value:?} is not a kernel tier (expected scalar, avx2, avx512 or auto)")]
    Unknown {
        /// The value as given.
        value: String,
    },
    /// The tier needs features this CPU lacks.
    #[error("{ENV_ISA}={tier} needs CPU features this machine lacks: {}", missing.join(", "))]
    Unsupported {
        /// The tier asked for.
        tier: KernelTier,
        /// The features it needs that the CPU lacks.
        missing: Vec<&'static str>,
    },
}

/// Chooses the tier for an [`ENV_ISA`] value (`None`, empty or `auto`: the best `features` support).
pub fn select_tier(
    requested: Option<&str>,
    features: &CpuFeatures,
) -> Result<KernelTier, IsaError> {
    let requested = requested.map(str::trim).unwrap_or("");
    if requested.is_empty() || requested.eq_ignore_ascii_case("auto") {
        return Ok(features.best_tier());
    }
    let tier: KernelTier = requested.parse()?;
    let missing = features.missing(tier);
    if missing.is_empty() {
        Ok(tier)
    } else {
        Err(IsaError::Unsupported { tier, missing })
    }
}

/// The tier this process runs, chosen on first use from [`ENV_ISA`] and the CPU's features.
pub fn tier() -> Result<KernelTier, IsaError> {
    static TIER: OnceLock<Result<KernelTier, IsaError>> = OnceLock::new();
    TIER.get_or_init(|| {
        let requested = std::env::var(ENV_ISA).ok();
        select_tier(requested.as_deref(), CpuFeatures::get())
    })
    .clone()
}

/// Every tier this CPU can run, slowest first (for tests and benches).
pub fn available_tiers() -> Vec<KernelTier> {
    let features = CpuFeatures::get();
    KernelTier::ALL
        .into_iter()
        .filter(|&t| features.supports(t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_FEATURES: CpuFeatures = CpuFeatures {
        avx2: true,
        fma: true,
        f16c: true,
        avx512f: true,
        avx512bw: true,
        avx512vl: true,
        avx512vnni: true,
        avx512bf16: true,
    };

    const AVX2_ONLY: CpuFeatures = CpuFeatures {
        avx2: true,
        fma: true,
        f16c: true,
        avx512f: false,
        avx512bw: false,
        avx512vl: false,
        avx512vnni: false,
        avx512bf16: false,
    };

    #[test]
    fn tier_names_round_trip() {
        for tier in KernelTier::ALL {
            assert_eq!(tier.name().parse::<KernelTier>(), Ok(tier));
            assert_eq!(tier.to_string(), tier.name());
        }
        assert_eq!(" AVX512\n".parse::<KernelTier>(), Ok(KernelTier::Avx512));
    }

    #[test]
    fn unset_empty_or_auto_selects_the_best_supported_tier() {
        for value in [None, Some(""), Some("  "), Some("auto"), Some("AUTO")] {
            assert_eq!(
                select_tier(value, &ALL_FEATURES),
                Ok(KernelTier::Avx512),
                "{value:?}"
            );
            assert_eq!(select_tier(value, &AVX2_ONLY), Ok(KernelTier::Avx2));
            assert_eq!(
                select_tier(value, &CpuFeatures::default()),
                Ok(KernelTier::Scalar)
            );
        }
    }

    #[test]
    fn a_supported_tier_can_be_forced() {
        assert_eq!(
            select_tier(Some("scalar"), &ALL_FEATURES),
            Ok(KernelTier::Scalar)
        );
        assert_eq!(
            select_tier(Some("Avx2"), &ALL_FEATURES),
            Ok(KernelTier::Avx2)
        );
        assert_eq!(
            select_tier(Some("avx512"), &ALL_FEATURES),
            Ok(KernelTier::Avx512)
        );
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn forcing_a_tier_the_cpu_lacks_names_the_missing_features() {
        let err = select_tier(Some("avx512"), &AVX2_ONLY).unwrap_err();
        assert_eq!(
            err,
            IsaError::Unsupported {
                tier: KernelTier::Avx512,
                missing: vec!["avx512f", "avx512bw", "avx512vl", "avx512vnni"],
            }
        );
        assert_eq!(
            err.to_string(),
            "STRATA_ISA=avx512 needs CPU features this machine lacks: \
             avx512f, avx512bw, avx512vl, avx512vnni"
        );
        let no_vnni = CpuFeatures {
            avx512vnni: false,
            ..ALL_FEATURES
        };
        assert_eq!(no_vnni.best_tier(), KernelTier::Avx2);
    }

    #[test]
    fn an_unknown_tier_is_refused_with_the_accepted_names() {
        let err = select_tier(Some("avx-512"), &ALL_FEATURES).unwrap_err();
        assert_eq!(
            err.to_string(),
            "STRATA_ISA=\"avx-512\" is not a kernel tier (expected scalar, avx2, avx512 or auto)"
        );
    }

    #[test]
    fn available_tiers_start_with_scalar_and_end_with_the_best() {
        let tiers = available_tiers();
        assert_eq!(tiers.first(), Some(&KernelTier::Scalar));
        assert_eq!(tiers.last(), Some(&CpuFeatures::get().best_tier()));
    }
}
