//! `once --pushgateway URL`: push a run's metrics for a CronJob, where no
//! process lives long enough to be scraped.
//!
//! Each job is pushed to its own group (`job="seatflow-reconciler"`,
//! `kind=<job>`; never `instance`, so successive pods update one group) with
//! push-add semantics (POST), which replaces only the families pushed:
//! - a run that did not succeed omits `last_success_timestamp_seconds`, so
//!   the last success survives failures;
//! - a failed run omits the scan gauges (drift, deferred, backlog,
//!   stuck_leases), which
//!   describe the last *completed* scan;
//! - counters continue from what the group already holds (read from the
//!   Pushgateway's JSON API, `GET /api/v1/metrics`), so `rate()` and
//!   `increase()` work on the Pushgateway's series as on a daemon's.
//!   The run-duration and drift-age histograms are per run.
//!
//! The process's own series (`build_info`, `dry_run`) go once per run to the
//! group `job="seatflow-reconciler"` (no `kind`), so one CronJob counts as
//! one reconciler, not five. `process_*` is not pushed: a short-lived pod's
//! CPU and memory, kept by the Pushgateway forever, would mislead.

use std::collections::BTreeMap;

use prometheus::proto::MetricFamily;

use crate::config::redact_url;
use crate::jobs::report::{JobReport, Outcome};
use crate::metrics::Metrics;
use crate::model::Kind;

/// The `job` grouping label.
pub const PUSH_JOB: &str = "seatflow-reconciler";

pub fn push_url(base: &str, kind: Kind) -> String {
    format!(
        "{}/metrics/job/{PUSH_JOB}/kind/{}",
        base.trim_end_matches('/'),
        kind.label()
    )
}

/// The group of the process's own series (`build_info`, `dry_run`).
pub fn process_push_url(base: &str) -> String {
    format!("{}/metrics/job/{PUSH_JOB}", base.trim_end_matches('/'))
}

/// The families pushed once per run: `build_info` and `dry_run`.
pub fn process_families(metrics: &Metrics) -> Vec<MetricFamily> {
    metrics
        .gather()
        .into_iter()
        .filter(|f| Metrics::is_process_family(f.name()) && !f.name().starts_with("process_"))
        .collect()
}

/// One sample of a text exposition: name, labels, value.
pub type Sample = (String, BTreeMap<String, String>, f64);

/// The samples the Pushgateway holds, from its JSON API
/// (`GET /api/v1/metrics`): every group's counters and gauges with their
/// labels (the group's grouping labels included). Histograms (no single
/// value) are left out; nothing here needs them. Reading the structured API
/// instead of the text exposition leaves no text format to parse by hand
/// (escaping, `NaN`, timestamps, exemplars are the Pushgateway's business).
pub fn samples_from_api(body: &serde_json::Value) -> Vec<Sample> {
    let mut out = Vec::new();
    for group in body["data"].as_array().into_iter().flatten() {
        let Some(families) = group.as_object() else {
            continue;
        };
        for (name, family) in families {
            for m in family["metrics"].as_array().into_iter().flatten() {
                let Some(value) = m["value"].as_str().and_then(|v| v.parse::<f64>().ok()) else {
                    continue;
                };
                let mut labels = BTreeMap::new();
                for source in [&group["labels"], &m["labels"]] {
                    for (k, v) in source.as_object().into_iter().flatten() {
                        if let Some(v) = v.as_str() {
                            labels.insert(k.clone(), v.to_string());
                        }
                    }
                }
                out.push((name.clone(), labels, value));
            }
        }
    }
    out
}

/// Adds the counters a group already holds for `kind` to this run's.
pub fn carry_counters(metrics: &Metrics, kind: Kind, previous: &[Sample]) {
    let k = kind.label();
    for (name, labels, value) in previous {
        if labels.get("job").map(String::as_str) != Some(PUSH_JOB)
            || labels.get("kind").map(String::as_str) != Some(k)
            || *value < 0.0
        {
            continue;
        }
        let n = *value as u64;
        let label = |l: &str| labels.get(l).map(String::as_str).unwrap_or("");
        match name.as_str() {
            "seatflow_reconcile_fixes_total" => metrics.fixes.with_label_values(&[k]).inc_by(n),
            "seatflow_reconcile_scanned_total" => metrics.scanned.with_label_values(&[k]).inc_by(n),
            "seatflow_reconcile_mutex_busy_total" => {
                metrics.mutex_busy.with_label_values(&[k]).inc_by(n)
            }
            "seatflow_reconcile_runs_total" => metrics
                .runs
                .with_label_values(&[k, label("outcome")])
                .inc_by(n),
            "seatflow_reconcile_errors_total" => metrics
                .errors
                .with_label_values(&[k, label("stage")])
                .inc_by(n),
            _ => {}
        }
    }
}

/// The families of one job's run, as pushed (see the module comment).
pub fn families_for_push(metrics: &Metrics, report: &JobReport) -> Vec<MetricFamily> {
    let k = report.kind.label();
    metrics
        .gather()
        .into_iter()
        .filter(|f| match f.name() {
            "seatflow_reconciler_dependency_up" => false,
            name if Metrics::is_process_family(name) => false,
            "seatflow_reconcile_last_success_timestamp_seconds" => {
                report.outcome == Outcome::Success
            }
            "seatflow_reconcile_drift"
            | "seatflow_reconcile_deferred"
            | "seatflow_reconcile_backlog"
            | "seatflow_reconcile_stuck_leases" => report.outcome != Outcome::Failure,
            _ => true,
        })
        .filter_map(|mut f| {
            let mine: Vec<_> = f
                .take_metric()
                .into_iter()
                .filter(|m| {
                    m.get_label()
                        .iter()
                        .all(|l| l.name() != "kind" || l.value() == k)
                })
                .collect();
            if mine.is_empty() {
                return None;
            }
            f.set_metric(mine);
            Some(f)
        })
        .collect()
}

/// Pushes every job of a run to its group.
pub async fn push_runs(base: &str, reports: &[JobReport]) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let where_ = redact_url(base);
    let previous = match client
        .get(format!("{}/api/v1/metrics", base.trim_end_matches('/')))
        .send()
        .await
    {
        Ok(r) if r.status().is_success() => {
            let text = r.text().await.unwrap_or_default();
            let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("{where_}: GET /api/v1/metrics is not the Pushgateway's JSON: {e}")
            })?;
            samples_from_api(&body)
        }
        Ok(r) => anyhow::bail!("{where_} answered {} to GET /api/v1/metrics", r.status()),
        Err(e) => anyhow::bail!("{where_}: {}", e.without_url()),
    };
    let process = Metrics::new();
    process.set_dry_run(reports.iter().any(|r| r.dry_run));
    let mut pushes = vec![(
        process_push_url(base),
        Metrics::encode_families(&process_families(&process)),
    )];
    for report in reports {
        let metrics = Metrics::new();
        metrics.record(report);
        carry_counters(&metrics, report.kind, &previous);
        pushes.push((
            push_url(base, report.kind),
            Metrics::encode_families(&families_for_push(&metrics, report)),
        ));
    }
    for (url, body) in pushes {
        let response = client
            .post(url)
            .header("Content-Type", "text/plain; version=0.0.4")
            .body(body)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{where_}: {}", e.without_url()))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            anyhow::bail!("{where_} answered {status}: {}", text.trim());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_key_has_the_job_and_kind_but_no_instance() {
        assert_eq!(
            push_url("http://pgw:9091/", Kind::OrphanLocks),
            "http://pgw:9091/metrics/job/seatflow-reconciler/kind/orphan_locks"
        );
    }

    #[test]
    fn counters_continue_and_failures_keep_the_last_success() {
        // As the Pushgateway's GET /api/v1/metrics answers.
        let api: serde_json::Value = serde_json::json!({
            "status": "success",
            "data": [
                {
                    "labels": {"job": "seatflow-reconciler", "kind": "orphan_locks"},
                    "last_push_successful": true,
                    "seatflow_reconcile_fixes_total": {"type": "COUNTER", "metrics": [
                        {"labels": {"instance": "", "job": "seatflow-reconciler", "kind": "orphan_locks"}, "value": "5"}
                    ]},
                    "seatflow_reconcile_runs_total": {"type": "COUNTER", "metrics": [
                        {"labels": {"instance": "", "job": "seatflow-reconciler", "kind": "orphan_locks", "outcome": "success"}, "value": "2"}
                    ]},
                    "seatflow_reconcile_run_duration_seconds": {"type": "HISTOGRAM", "metrics": [
                        {"labels": {"kind": "orphan_locks"}, "buckets": {"1": "1"}, "count": "1", "sum": "0.1"}
                    ]}
                },
                {
                    "labels": {"job": "seatflow-reconciler", "kind": "paid_seats"},
                    "seatflow_reconcile_fixes_total": {"type": "COUNTER", "metrics": [
                        {"labels": {"instance": "", "job": "seatflow-reconciler", "kind": "paid_seats"}, "value": "9"}
                    ]}
                }
            ]
        });
        let previous = samples_from_api(&api);
        assert_eq!(previous.len(), 3, "{previous:?}");
        let mut r = JobReport::new(Kind::OrphanLocks);
        r.fixed = 2;
        r.fail(&crate::error::Error::Protocol("down".into()));
        r.scanned = 1;
        r.finish();
        let m = Metrics::new();
        m.record(&r);
        carry_counters(&m, Kind::OrphanLocks, &previous);
        let text = Metrics::encode_families(&families_for_push(&m, &r));
        assert!(
            text.contains("seatflow_reconcile_fixes_total{kind=\"orphan_locks\"} 7"),
            "{text}"
        );
        assert!(text.contains(
            "seatflow_reconcile_runs_total{kind=\"orphan_locks\",outcome=\"success\"} 2"
        ));
        assert!(text.contains(
            "seatflow_reconcile_runs_total{kind=\"orphan_locks\",outcome=\"partial\"} 1"
        ));
        assert!(!text.contains("paid_seats"), "only this job's series");
        assert!(
            !text.contains("last_success"),
            "a partial run keeps the last success"
        );
        assert!(!text.contains("dependency_up"));
        assert!(text.contains("seatflow_reconcile_drift{kind=\"orphan_locks\"}"));
        assert!(
            !text.contains("build_info") && !text.contains("dry_run") && !text.contains("process_"),
            "the process's own series are pushed once per run, not per job"
        );
    }

    #[test]
    fn build_info_and_dry_run_are_pushed_once_per_run() {
        assert_eq!(
            process_push_url("http://pgw:9091/"),
            "http://pgw:9091/metrics/job/seatflow-reconciler"
        );
        let m = Metrics::new();
        m.set_dry_run(true);
        let text = Metrics::encode_families(&process_families(&m));
        assert!(
            text.contains("seatflow_reconciler_build_info{version="),
            "{text}"
        );
        assert!(text.contains("seatflow_reconciler_dry_run 1"), "{text}");
        assert!(
            !text.contains("kind=") && !text.contains("process_"),
            "{text}"
        );
    }
}
