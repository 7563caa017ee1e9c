//! Hardware fingerprints: what the host is (CPU model, cores and threads, ISA flags, caches, NUMA
//! nodes, memory, read from /proc and /sys) and what it can do (memory bandwidth, peak int8 and f32
//! throughput, from short microbenchmarks with the engine's own kernels). The descriptive part is
//! hashed into a fingerprint that identifies the host kind; measured figures are stored beside it.

use std::{
    collections::BTreeSet,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};
use strata_engine::{kernels::dispatch, quant};

use crate::store::{HardwareRow, NewHardware, Store};

/// ISA flags the kernels care about, as /proc/cpuinfo names them.
const KERNEL_FLAGS: &[&str] = &[
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_int8",
    "amx_bf16",
    "asimd",
    "asimddp",
    "sve",
];

/// Reads the host's description (no measurement).
pub fn describe() -> NewHardware {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_owned())
        })
    };
    let cpu_model = field("model name")
        .or_else(|| field("Model"))
        .or_else(|| field("CPU part").map(|p| format!("CPU part {p}")))
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let flags: BTreeSet<&str> = field("flags")
        .or_else(|| field("Features"))
        .map(|f| {
            f.split_whitespace()
                .filter_map(|x| KERNEL_FLAGS.iter().find(|k| **k == x).copied())
                .collect()
        })
        .unwrap_or_default();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
    let cores = physical_cores(&cpuinfo).unwrap_or(threads);
    let caches = host_caches();
    let mut hw = NewHardware {
        fingerprint_hash: String::new(),
        cpu_model,
        cores,
        threads,
        isa_flags: flags.into_iter().map(str::to_owned).collect(),
        l1d_cache_bytes: caches.l1d,
        l2_cache_bytes: caches.l2,
        l3_cache_bytes: caches.l3,
        numa_nodes: numa_nodes(),
        memory_bytes: mem_total().unwrap_or(0),
        bandwidth_gb_per_s: None,
        peak_int8_gops: None,
        peak_f32_gops: None,
    };
    hw.fingerprint_hash = fingerprint_hash(&hw);
    hw
}

/// The hash of the descriptive fields: the same host kind gives the same hash.
pub fn fingerprint_hash(hw: &NewHardware) -> String {
    let text = format!(
        "{}|{}|{}|{}|{:?}|{:?}|{:?}|{}|{}",
        hw.cpu_model,
        hw.cores,
        hw.threads,
        hw.isa_flags.join(","),
        hw.l1d_cache_bytes,
        hw.l2_cache_bytes,
        hw.l3_cache_bytes,
        hw.numa_nodes,
        // Round memory to GiB: the kernel's reserved memory varies between boots.
        hw.memory_bytes >> 30,
    );
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

fn physical_cores(cpuinfo: &str) -> Option<i64> {
    let mut cores = BTreeSet::new();
    let mut physical = String::new();
    for line in cpuinfo.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "physical id" => physical = v.trim().to_owned(),
            "core id" => {
                cores.insert((physical.clone(), v.trim().to_owned()));
            }
            _ => {}
        }
    }
    (!cores.is_empty()).then_some(cores.len() as i64)
}

/// The sizes of one core's L1 data and L2 caches and of the L3 cache, in bytes, where known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caches {
    /// L1 data cache.
    pub l1d: Option<i64>,
    /// L2 cache.
    pub l2: Option<i64>,
    /// L3 cache.
    pub l3: Option<i64>,
}

impl Caches {
    fn set(&mut self, level: u32, kind: &str, bytes: i64) {
        let slot = match (level, kind) {
            (1, "Data") => &mut self.l1d,
            (2, "Unified") => &mut self.l2,
            (3, "Unified") => &mut self.l3,
            _ => return,
        };
        slot.get_or_insert(bytes);
    }

    /// Each size missing here taken from `other`.
    fn or(self, other: Caches) -> Caches {
        Caches {
            l1d: self.l1d.or(other.l1d),
            l2: self.l2.or(other.l2),
            l3: self.l3.or(other.l3),
        }
    }
}

/// The host's caches: from /sys/devices/system/cpu/cpu0/cache, sizes missing there from `lscpu -C`.
pub fn host_caches() -> Caches {
    let sysfs = sysfs_caches(Path::new("/sys/devices/system/cpu/cpu0/cache"));
    if sysfs.l1d.is_some() && sysfs.l2.is_some() && sysfs.l3.is_some() {
        return sysfs;
    }
    let lscpu = std::process::Command::new("lscpu")
        .args(["-C=LEVEL,TYPE,ONE-SIZE", "-B"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| lscpu_caches(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default();
    sysfs.or(lscpu)
}

/// The caches listed under `dir` (a cpu's `cache` folder): each `index*` folder's `level`, `type` and
/// `size`; folders or files that cannot be read are skipped.
pub fn sysfs_caches(dir: &Path) -> Caches {
    let mut caches = Caches::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return caches;
    };
    let mut indexes: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("index"))
        })
        .collect();
    indexes.sort();
    for index in indexes {
        let read = |name: &str| std::fs::read_to_string(index.join(name)).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        if let (Ok(level), Some(bytes)) = (level.trim().parse(), parse_size(size.trim())) {
            caches.set(level, kind.trim(), bytes);
        }
    }
    caches
}

/// The caches in `lscpu -C=LEVEL,TYPE,ONE-SIZE -B` output: a heading line, then one line per cache
/// with its level, type and one instance's size in bytes.
pub fn lscpu_caches(text: &str) -> Caches {
    let mut caches = Caches::default();
    for line in text.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [level, kind, size] = fields.as_slice()
            && let (Ok(level), Some(bytes)) = (level.parse(), parse_size(size))
        {
            caches.set(level, kind, bytes);
        }
    }
    caches
}

/// `48K`, `1024K`, `32M`, `32768` -> bytes.
fn parse_size(text: &str) -> Option<i64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits.parse().ok()?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// NUMA nodes from /sys/devices/system/node (1 when the folder is absent).
pub fn numa_nodes() -> i64 {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.strip_prefix("node")
                        .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
                })
                .count() as i64
        })
        .unwrap_or(0)
        .max(1)
}

fn mem_total() -> Option<i64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// Fills in measured memory bandwidth and peak int8/f32 throughput with short microbenchmarks
/// (about a second in all), on all hardware threads.
pub fn measure(hw: &mut NewHardware) {
    let threads = hw.threads.max(1) as usize;
    hw.bandwidth_gb_per_s = Some(read_bandwidth_gb_per_s(threads));
    let (int8, f32) = peak_throughput(threads);
    hw.peak_int8_gops = Some(int8);
    hw.peak_f32_gops = Some(f32);
}

/// Read bandwidth in GB/s as decode uses it: `threads` threads each stream their share of a 512 MiB
/// array (far larger than any cache) once, reading only; the best of three passes. Bandwidth on a
/// shared host moves with its neighbours, so a share of it is only meaningful against a figure taken
/// in the same minute.
pub fn read_bandwidth_gb_per_s(threads: usize) -> f64 {
    let threads = threads.max(1);
    let len: usize = (512 << 20) / 8;
    let data: Vec<u64> = (0..len as u64).collect();
    let chunk = len.div_ceil(threads);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let total: u64 = std::thread::scope(|s| {
            data.chunks(chunk)
                .map(|part| s.spawn(move || part.iter().fold(0u64, |a, &x| a.wrapping_add(x))))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        std::hint::black_box(total);
        best = best.min(start.elapsed().as_secs_f64());
    }
    (len * 8) as f64 / best / 1e9
}

/// Peak int8 (q8_0 x q8_0 dot products) and f32 (dot products) throughput in billions of operations
/// per second (a multiply and an add count as two), on cache-resident data with the best kernel tier.
fn peak_throughput(threads: usize) -> (f64, f64) {
    let n = 4096;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 113) as f32 / 57.0 - 1.0)
        .collect();
    let y: Vec<f32> = (0..n)
        .map(|i| ((i * 104_729) % 127) as f32 / 63.0 - 1.0)
        .collect();
    let quantize = |v: &[f32]| {
        let mut blocks = vec![quant::BlockQ8_0::default(); v.len() / quant::QK];
        quant::quantize_q8_0(v, &mut blocks);
        Arc::new(blocks)
    };
    let (qx, qy) = (quantize(&x), quantize(&y));
    let (x, y) = (Arc::new(x), Arc::new(y));
    let table = dispatch::table();
    let window = Duration::from_millis(200);
    let int8 = parallel_rate(threads, window, || {
        std::hint::black_box(table.vec_dot_q8_0_q8_0(&qx, &qy));
    }) * 2.0
        * n as f64;
    let f32 = parallel_rate(threads, window, || {
        std::hint::black_box(table.vec_dot_f32(&x, &y));
    }) * 2.0
        * n as f64;
    (int8 / 1e9, f32 / 1e9)
}

/// Calls of `work` per second across `threads` threads over `window`.
fn parallel_rate(threads: usize, window: Duration, work: impl Fn() + Sync) -> f64 {
    let start = Instant::now();
    let calls: u64 = std::thread::scope(|s| {
        (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut calls = 0u64;
                    while start.elapsed() < window {
                        for _ in 0..64 {
                            work();
                        }
                        calls += 64;
                    }
                    calls
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap_or(0))
            .sum()
    });
    calls as f64 / start.elapsed().as_secs_f64()
}

/// The stored row for this host: found by fingerprint, or measured and recorded on first use.
///
/// # Errors
/// When the store fails.
pub async fn ensure_recorded(store: &dyn Store) -> crate::store::Result<HardwareRow> {
    let described = describe();
    if let Some(row) = store
        .find_hardware_by_fingerprint(&described.fingerprint_hash)
        .await?
    {
        return Ok(row);
    }
    let fallback = described.clone();
    let measured = tokio::task::spawn_blocking(move || {
        let mut hw = described;
        measure(&mut hw);
        hw
    })
    .await
    // A panicking microbenchmark leaves the figures unmeasured rather than failing the caller.
    .unwrap_or(fallback);
    match store.insert_hardware(&measured).await {
        Ok(row) => Ok(row),
        // Another controller recorded the same host kind meanwhile.
        Err(crate::store::StoreError::Conflict { .. }) => store
            .find_hardware_by_fingerprint(&measured.fingerprint_hash)
            .await?
            .ok_or_else(|| {
                crate::store::StoreError::not_found("hardware", &measured.fingerprint_hash)
            }),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("12Q"), None);
    }

    #[test]
    fn caches_are_read_from_sysfs_index_folders_past_other_files() {
        let dir = tempfile::tempdir().unwrap();
        // A file sorting before the index folders (sysfs has `uevent`) must not stop the reading.
        std::fs::write(dir.path().join("a-uevent"), "").unwrap();
        for (i, level, kind, size) in [
            (0, "1", "Data", "48K"),
            (1, "1", "Instruction", "32K"),
            (2, "2", "Unified", "2048K"),
            (3, "3", "Unified", "260M"),
        ] {
            let index = dir.path().join(format!("index{i}"));
            std::fs::create_dir(&index).unwrap();
            for (name, text) in [("level", level), ("type", kind), ("size", size)] {
                std::fs::write(index.join(name), format!("{text}\n")).unwrap();
            }
        }
        let caches = sysfs_caches(dir.path());
        assert_eq!(
            caches,
            Caches {
                l1d: Some(48 << 10),
                l2: Some(2 << 20),
                l3: Some(260 << 20)
            }
        );
        assert_eq!(sysfs_caches(&dir.path().join("absent")), Caches::default());
    }

    #[test]
    fn caches_are_read_from_lscpu_where_sysfs_has_none() {
        let text = "LEVEL TYPE        ONE-SIZE\n    1 Data           32768\n    1 Instruction    32768\n\
                    \x20   2 Unified      1048576\n    3 Unified     33554432\n";
        let lscpu = lscpu_caches(text);
        assert_eq!(
            lscpu,
            Caches {
                l1d: Some(32 << 10),
                l2: Some(1 << 20),
                l3: Some(32 << 20)
            }
        );
        let partial = Caches {
            l1d: Some(48 << 10),
            ..Caches::default()
        };
        assert_eq!(partial.or(lscpu).l1d, Some(48 << 10));
        assert_eq!(partial.or(lscpu).l3, Some(32 << 20));
    }

    #[test]
    fn this_host_is_described_and_hashed_stably() {
        let a = describe();
        let b = describe();
        assert_eq!(a.fingerprint_hash, b.fingerprint_hash);
        assert_eq!(a.fingerprint_hash.len(), 64);
        assert!(a.threads >= 1 && a.cores >= 1 && a.cores <= a.threads);
        assert!(a.numa_nodes >= 1);
        let mut other = a.clone();
        other.cores += 1;
        assert_ne!(fingerprint_hash(&other), a.fingerprint_hash);
    }

    #[test]
    fn cores_count_distinct_physical_core_ids() {
        let info = "processor: 0\nphysical id: 0\ncore id: 0\n\nprocessor: 1\nphysical id: 0\ncore id: 0\n\
                    \nprocessor: 2\nphysical id: 0\ncore id: 1\n";
        assert_eq!(physical_cores(info), Some(2));
        assert_eq!(physical_cores("processor: 0\n"), None);
    }
}
