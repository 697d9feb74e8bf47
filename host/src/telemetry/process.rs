//! The process's own figures, from `/proc/self` (Linux; elsewhere none).

/// Resident memory in bytes (`VmRSS`).
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// User plus system CPU time, in seconds. The kernel reports it in clock
/// ticks of USER_HZ, which is 100 on every Linux architecture idem runs on.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; fields count from its ')'.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_process_reads_itself() {
        assert!(super::resident_bytes().is_some_and(|b| b > 1 << 20));
        assert!(super::cpu_seconds().is_some_and(|s| s >= 0.0));
    }
}
