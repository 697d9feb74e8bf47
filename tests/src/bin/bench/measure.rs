//! What a child process cost: CPU seconds and peak RSS, read from `/proc`
//! while it runs (the peak) and once it has exited but is not reaped yet
//! (the CPU time a zombie still reports).

use std::process::Child;
use std::time::Duration;

#[derive(Debug, Clone, Copy, Default)]
pub struct Cost {
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
}

/// `/proc/<pid>/stat`: the state and utime + stime in seconds.
fn stat(pid: u32) -> Option<(char, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on Linux.
    Some((state, ticks / 100.0))
}

/// `VmHWM` of `/proc/<pid>/status`, in MiB.
fn peak_rss(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Waits until `child` exits (it must exit by itself or be signalled
/// elsewhere) and returns its cost. Its stdout is left for the caller.
pub async fn watch(child: &Child) -> Cost {
    let pid = child.id();
    let mut cost = Cost::default();
    loop {
        if let Some(rss) = peak_rss(pid) {
            cost.peak_rss_mib = cost.peak_rss_mib.max(rss);
        }
        match stat(pid) {
            Some(('Z', cpu)) | Some(('X', cpu)) => {
                cost.cpu_s = cpu;
                return cost;
            }
            Some((_, cpu)) => cost.cpu_s = cpu,
            None => return cost,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// This process's own CPU seconds so far (user + system).
pub fn own_cpu_s() -> f64 {
    stat(std::process::id()).map_or(0.0, |(_, cpu)| cpu)
}
