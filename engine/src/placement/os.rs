//! The Linux calls behind placement: `set_mempolicy` for memory, `sched_setaffinity` for threads.
#![allow(unsafe_code)]

pub(super) const MPOL_BIND: i32 = 2;
pub(super) const MPOL_INTERLEAVE: i32 = 3;

pub(super) fn set_memory_policy(mode: i32, nodes: &[u32]) -> Result<(), String> {
    let mut mask = [0u64; 16];
    for &n in nodes {
        let (word, bit) = (n as usize / 64, n % 64);
        let slot = mask
            .get_mut(word)
            .ok_or_else(|| format!("node {n} is beyond the {} nodes supported", 16 * 64))?;
        *slot |= 1 << bit;
    }
    // SAFETY: set_mempolicy reads `maxnode` bits from `mask`, which holds 16 x 64 bits and lives
    // across the call; it changes only this thread's policy (inherited by threads started later).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            mode,
            mask.as_ptr(),
            (mask.len() * 64) as libc::c_ulong,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

pub(super) fn bind_current_thread(cpu: usize) -> Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("CPU {cpu} is beyond the CPU set size"));
    }
    // SAFETY: cpu_set_t is plain data for which all zero bytes are the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

pub(super) fn current_thread_cpus() -> Vec<usize> {
    // SAFETY: as in `bind_current_thread`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}
