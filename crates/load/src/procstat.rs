//! CPU time of other processes (the service, the XMPP server) over a measured window, from
//! `/proc/PID/stat`: `utime + stime`, fields 14 and 15, in clock ticks; and their resident
//! memory, from `/proc/PID/status`.
//!
//! Ticks per second come from `getconf CLK_TCK` once (no libc dependency for `sysconf`);
//! when that fails, 100, the value on every common Linux configuration.

use std::process::Command;

/// Clock ticks per second.
fn ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// `utime + stime` of `pid` in ticks, `None` if the process is gone or the file is odd.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field n is at index n - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// The resident set size of `pid` in MiB (`VmRSS`), `None` if it cannot be read.
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU seconds used by each watched process between [`CpuWindow::start`] and
/// [`CpuWindow::finish`].
pub struct CpuWindow {
    ticks: f64,
    start: Vec<(u32, Option<u64>)>,
}

impl CpuWindow {
    /// Samples the processes now (`None` entries are not watched).
    pub fn start(pids: &[Option<u32>]) -> CpuWindow {
        let start = pids.iter().map(|p| p.map_or((0, None), |pid| (pid, cpu_ticks(pid)))).collect();
        CpuWindow { ticks: ticks_per_second(), start }
    }

    /// Seconds of CPU per process since `start`, in the order given there; `None` for a
    /// process not watched, or one that could not be read at either end.
    pub fn finish(&self) -> Vec<Option<f64>> {
        self.start
            .iter()
            .map(|&(pid, start)| {
                let (start, end) = (start?, cpu_ticks(pid)?);
                Some(end.saturating_sub(start) as f64 / self.ticks)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_has_readable_cpu_time() {
        let window = CpuWindow::start(&[Some(std::process::id()), None]);
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        let used = window.finish();
        assert!(used[0].is_some_and(|s| s >= 0.0));
        assert!(used[1].is_none());
    }

    #[test]
    fn own_process_has_a_resident_size() {
        assert!(rss_mib(std::process::id()).is_some_and(|m| m > 0.0));
        assert_eq!(rss_mib(u32::MAX), None);
    }
}
