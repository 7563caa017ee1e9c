//! Whether the pilot's host was shared while the replay ran: the host's busy CPU time from
//! `/proc/stat` less that of the pilot's own processes (itself, its engine and its gateway) from
//! `/proc/<pid>/stat`, as the mean cores everything else used. Linux only; elsewhere nothing is
//! measured.

use std::time::Instant;

use super::report::HostLoad;

/// Mean cores other processes may use during the replay before the host counts as shared: a quarter
/// of a core is more than a quiet host's daemons use, and enough to lengthen the engine's steps and
/// the gaps between them.
pub(super) const SHARED_ABOVE_CORES: f64 = 0.25;

/// The host's CPU counters at one moment, in clock ticks summed over its cores.
#[derive(Debug, Clone, Copy, PartialEq)]
struct HostTicks {
    /// Time running processes (user, nice and system).
    busy: u64,
    /// All time (busy, idle, waiting for I/O, interrupts, stolen).
    total: u64,
    /// Cores (`cpuN` lines).
    cores: u32,
}

/// A measurement under way: the counters at its start.
pub(super) struct HostLoadProbe {
    pids: Vec<u32>,
    started: Instant,
    host: HostTicks,
    ours: u64,
}

impl HostLoadProbe {
    /// Starts measuring, with `pids` as the pilot's own processes; `None` when the counters cannot
    /// be read (logged).
    pub(super) fn start(pids: Vec<u32>) -> Option<Self> {
        let (host, ours) = read_counters(&pids)?;
        Some(Self {
            pids,
            started: Instant::now(),
            host,
            ours,
        })
    }

    /// The host's load since the start; `None` when the counters cannot be read (logged).
    pub(super) fn finish(self) -> Option<HostLoad> {
        let (host, ours) = read_counters(&self.pids)?;
        let window_s = self.started.elapsed().as_secs_f64();
        host_load(self.host, self.ours, host, ours, window_s)
    }
}

/// The host's counters and the summed ticks of `pids`.
fn read_counters(pids: &[u32]) -> Option<(HostTicks, u64)> {
    let read = |path: String| {
        std::fs::read_to_string(&path)
            .inspect_err(|e| tracing::warn!(%path, error = %e, "cannot read CPU counters"))
            .ok()
    };
    let host = host_ticks(&read("/proc/stat".into())?)?;
    let mut ours = 0;
    for pid in pids {
        ours += process_ticks(&read(format!("/proc/{pid}/stat"))?)?;
    }
    Some((host, ours))
}

/// The load between two readings `window_s` apart: the busy ticks not ours over all ticks, times the
/// cores (so the clock tick rate cancels out).
fn host_load(
    host_before: HostTicks,
    ours_before: u64,
    host_after: HostTicks,
    ours_after: u64,
    window_s: f64,
) -> Option<HostLoad> {
    let total = host_after.total.checked_sub(host_before.total)?;
    if total == 0 {
        return None;
    }
    let busy = host_after.busy.saturating_sub(host_before.busy) as f64;
    let ours = ours_after.saturating_sub(ours_before) as f64;
    let cores = host_after.cores;
    let share = |ticks: f64| ticks / total as f64 * f64::from(cores);
    let other_cores = share((busy - ours).max(0.0));
    Some(HostLoad {
        window_s,
        cores,
        pilot_cores: share(ours),
        other_cores,
        shared_above_cores: SHARED_ABOVE_CORES,
        shared: other_cores > SHARED_ABOVE_CORES,
    })
}

/// The host's counters from the text of `/proc/stat`: its `cpu` line (user, nice, system, idle,
/// iowait, irq, softirq, steal; the guest times that follow are already in user) and its `cpuN` lines.
fn host_ticks(stat: &str) -> Option<HostTicks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if ticks.len() < 4 {
        return None;
    }
    let cores = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some(HostTicks {
        busy: ticks[..3].iter().sum(),
        total: ticks.iter().sum(),
        cores: u32::try_from(cores).ok().filter(|&c| c > 0)?,
    })
}

/// User plus system ticks of a process (all its threads) from the text of its `/proc/<pid>/stat`.
fn process_ticks(stat: &str) -> Option<u64> {
    // Fields after the command name (which may hold spaces and parentheses) start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  1000 50 250 8000 100 10 20 5 0 0\n\
                        cpu0 500 25 125 4000 50 5 10 2 0 0\n\
                        cpu1 500 25 125 4000 50 5 10 3 0 0\n\
                        intr 12345\n\
                        ctxt 678\n";

    #[test]
    fn host_counters_are_read_from_proc_stat() {
        let t = host_ticks(STAT).expect("counters");
        assert_eq!(
            t,
            HostTicks {
                busy: 1300,
                total: 9435,
                cores: 2
            }
        );
        assert_eq!(host_ticks("intr 1\n"), None);
        assert_eq!(host_ticks("cpu  1 x 3 4\ncpu0 1 2 3 4\n"), None);
    }

    #[test]
    fn a_process_s_ticks_are_its_user_and_system_time() {
        let stat = "4242 (strata (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 730 41 3 2 20 0 9 0";
        assert_eq!(process_ticks(stat), Some(771));
        assert_eq!(process_ticks("4242 (cut"), None);
    }

    /// Over 10 s on 2 cores (2000 ticks), 1300 busy ticks of which the pilot's 800: others used half
    /// a core, so the host was shared; with the pilot's 1250 of them, it was not.
    #[test]
    fn the_others_load_is_the_busy_time_not_the_pilot_s() {
        let before = HostTicks {
            busy: 10_000,
            total: 50_000,
            cores: 2,
        };
        let after = HostTicks {
            busy: 11_300,
            total: 52_000,
            cores: 2,
        };
        let shared = host_load(before, 400, after, 1200, 10.0).expect("a load");
        assert!((shared.other_cores - 0.5).abs() < 1e-12, "{shared:?}");
        assert!((shared.pilot_cores - 0.8).abs() < 1e-12, "{shared:?}");
        assert!(shared.shared);
        assert_eq!((shared.cores, shared.window_s), (2, 10.0));
        let quiet = host_load(before, 400, after, 1650, 10.0).expect("a load");
        assert!((quiet.other_cores - 0.05).abs() < 1e-12, "{quiet:?}");
        assert!(!quiet.shared);
        let ours_beyond = host_load(before, 0, after, 5000, 10.0).expect("a load");
        assert_eq!(ours_beyond.other_cores, 0.0, "never below none");
        assert_eq!(host_load(before, 0, before, 0, 0.0), None);
    }

    /// This process's own counters can be read here, and its time counts as the pilot's.
    #[test]
    fn the_running_host_can_be_measured() {
        let me = [std::process::id()];
        let ours = || read_counters(&me).expect("Linux counters").1;
        let probe = HostLoadProbe::start(me.to_vec()).expect("Linux counters");
        // Spin until this process has used 20 ticks of CPU (0.2 s at the usual 100 Hz), however
        // busy the host is; a minute at most.
        let (before, spin) = (ours(), Instant::now());
        let mut x = 0u64;
        while ours() < before + 20 && spin.elapsed().as_secs() < 60 {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        let load = probe.finish().expect("a load");
        assert!(load.cores >= 1 && load.window_s > 0.0, "{load:?}");
        let used_s = load.pilot_cores * load.window_s;
        assert!(used_s >= 0.15, "the spinning test is ours: {load:?}");
    }
}
