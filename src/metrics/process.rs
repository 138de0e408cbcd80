//! The standard `process_*` metrics, with `process_cpu_seconds_total` to
//! the clock tick.
//!
//! The `prometheus` crate's `ProcessCollector` keeps CPU time in an integer
//! counter of whole seconds, so a reconciler that uses a few hundred
//! milliseconds a minute shows 0, then a one-second spike. This wraps that
//! collector (memory, file descriptors, threads and start time stay its
//! own) and replaces only the CPU family with user + system time from
//! `/proc/self/stat`, in seconds to the tick (`CLK_TCK`, usually 10 ms).

use prometheus::core::{Collector, Desc};
use prometheus::process_collector::ProcessCollector;
use prometheus::proto::MetricFamily;

pub const CPU_FAMILY: &str = "process_cpu_seconds_total";

pub struct ProcessMetrics {
    inner: ProcessCollector,
}

impl ProcessMetrics {
    pub fn for_self() -> ProcessMetrics {
        ProcessMetrics {
            inner: ProcessCollector::for_self(),
        }
    }
}

/// User + system CPU time of this process, in seconds, from `/proc`.
pub fn cpu_seconds() -> Option<f64> {
    let stat = procfs::process::Process::myself().ok()?.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// The most files this process may have open (its soft limit), from
/// `/proc`; None when unlimited or unknown.
pub fn open_files_limit() -> Option<u64> {
    let limits = procfs::process::Process::myself().ok()?.limits().ok()?;
    match limits.max_open_files.soft_limit {
        procfs::process::LimitValue::Value(n) => Some(n),
        procfs::process::LimitValue::Unlimited => None,
    }
}

impl Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.inner.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let mut families = self.inner.collect();
        // Without /proc the crate's own value (whole seconds) stays.
        if let Some(seconds) = cpu_seconds() {
            for family in families.iter_mut().filter(|f| f.name() == CPU_FAMILY) {
                for metric in family.mut_metric().iter_mut() {
                    let mut counter = metric.get_counter().clone();
                    counter.set_value(seconds);
                    metric.set_counter(counter);
                }
            }
        }
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported_cpu(collector: &ProcessMetrics) -> f64 {
        let families = collector.collect();
        let family = families
            .iter()
            .find(|f| f.name() == CPU_FAMILY)
            .expect("the CPU family is collected");
        family.get_metric()[0].get_counter().get_value()
    }

    #[test]
    fn cpu_seconds_are_exported_to_the_tick_as_proc_counts_them() {
        let collector = ProcessMetrics::for_self();
        let tick = 1.0 / procfs::ticks_per_second() as f64;
        // Burn CPU until /proc shows a time that is not whole seconds, the
        // case the integer counter loses.
        let mut spin = 0u64;
        while cpu_seconds().unwrap().fract() < tick / 2.0 {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let before = cpu_seconds().unwrap();
        let exported = exported_cpu(&collector);
        let after = cpu_seconds().unwrap();
        assert!(
            before <= exported && exported <= after,
            "{before} <= {exported} <= {after}"
        );
        assert!(exported.fract() > 0.0, "whole seconds only: {exported}");
        // The other process families are still the crate's.
        let names: Vec<String> = collector
            .collect()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        for name in [
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
        }
    }
}
