//! CPU spent over a measured phase: the whole machine's busy CPU, from `/proc/stat` (Linux), what
//! an operation costs the server, the kernel and the benchmark's process together; and this
//! process's own (`getrusage`), the benchmark's client in the timed phases and the worker in the
//! burn-downs. Less noisy than a rate on a shared VM whose speed moves between phases: a phase
//! that waits (on a lock, on the disk) shows it as idle time, not as cost.

use std::time::Instant;

/// A reading of the machine's CPU counters.
#[derive(Debug, Clone, Copy)]
pub(super) struct CpuSample {
    /// Ticks spent busy (user, nice, system, irq, softirq), over all CPUs.
    busy: u64,
    /// All ticks (busy, idle, iowait and steal), over all CPUs.
    total: u64,
    at: Instant,
}

impl CpuSample {
    /// Now; None where `/proc/stat` cannot be read or parsed (not Linux).
    pub(super) fn now() -> Option<CpuSample> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        let (busy, total) = parse(text.lines().next()?)?;
        Some(CpuSample { busy, total, at: Instant::now() })
    }

    /// Busy CPU seconds of the whole machine since `self`: the busy share of all ticks, times the
    /// wall time, times the CPUs (which is what all ticks add up to, without knowing the tick's
    /// length).
    pub(super) fn busy_seconds_since(&self, cpus: usize) -> Option<f64> {
        let later = CpuSample::now()?;
        let total = later.total.checked_sub(self.total).filter(|t| *t > 0)?;
        let busy = later.busy.checked_sub(self.busy)?;
        let wall = later.at.duration_since(self.at).as_secs_f64();
        Some(busy as f64 / total as f64 * wall * cpus as f64)
    }
}

/// This process's CPU time (user and system, all threads) in seconds.
fn own_seconds() -> Option<f64> {
    usage_seconds(nix::sys::resource::UsageWho::RUSAGE_SELF)
}

/// The CPU time (user and system) of this process's children that have ended and been waited
/// for, and of their own children they waited for, in seconds.
pub(super) fn children_seconds() -> Option<f64> {
    usage_seconds(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
}

fn usage_seconds(who: nix::sys::resource::UsageWho) -> Option<f64> {
    let usage = nix::sys::resource::getrusage(who).ok()?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Some(secs(usage.user_time()) + secs(usage.system_time()))
}

/// CPU per operation over a phase, in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct CpuPerOp {
    /// The whole machine's busy CPU.
    pub machine_us: Option<f64>,
    /// This process's.
    pub own_us: Option<f64>,
}

/// Counts both from its start.
#[derive(Debug, Clone, Copy)]
pub(super) struct CpuMeter {
    machine: Option<CpuSample>,
    own: Option<f64>,
}

impl CpuMeter {
    pub(super) fn start() -> CpuMeter {
        CpuMeter { machine: CpuSample::now(), own: own_seconds() }
    }

    /// What `ops` operations cost each since the start (None where nothing was counted).
    pub(super) fn per_op(&self, ops: u64) -> CpuPerOp {
        if ops == 0 {
            return CpuPerOp::default();
        }
        let each = |seconds: f64| seconds / ops as f64 * 1e6;
        CpuPerOp {
            machine_us: self.machine.and_then(|m| m.busy_seconds_since(machine_cpus()?)).map(each),
            own_us: self.own.and_then(|before| Some(own_seconds()? - before)).map(each),
        }
    }
}

/// The `cpu` line of `/proc/stat`: user nice system idle iowait irq softirq steal [guest ...];
/// guest time is already inside user and nice, so it is not added again.
fn parse(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let n: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    if n.len() < 7 {
        return None;
    }
    let busy = n[0] + n[1] + n[2] + n[5] + n[6];
    let total = busy + n[3] + n[4] + n.get(7).copied().unwrap_or(0);
    Some((busy, total))
}

/// The CPUs the machine counts in `/proc/stat` (all of them, not only those this process may
/// use): the `cpuN` lines.
pub(super) fn machine_cpus() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let n =
        text.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)).count();
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_line_is_read_as_busy_and_all_ticks() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        assert_eq!(parse("cpu  100 5 50 800 20 3 2 10 7 0"), Some((160, 990)));
        assert_eq!(parse("cpu 1 2 3 4 5 6 7"), Some((1 + 2 + 3 + 6 + 7, 28)));
        assert_eq!(parse("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(parse("cpu 1 2 x 4 5 6 7 8"), None);
        assert_eq!(parse("cpu 1 2 3"), None);
    }

    #[test]
    fn this_process_counts_its_own_time() {
        let meter = CpuMeter::start();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let cost = meter.per_op(1);
        assert!(cost.own_us.is_some_and(|us| us > 0.0), "{cost:?}");
        assert!(CpuMeter::start().per_op(0).own_us.is_none());
    }

    #[test]
    fn a_sample_on_linux_counts_forward() {
        if let Some(s) = CpuSample::now() {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let busy = s.busy_seconds_since(machine_cpus().unwrap_or(1));
            assert!(busy.is_some_and(|b| b >= 0.0), "{busy:?}");
        }
    }
}
