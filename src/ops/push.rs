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
//! - counters and histograms (run duration, drift age) continue from what
//!   the group already holds (read from the Pushgateway's JSON API,
//!   `GET /api/v1/metrics`), so `rate()`, `increase()` and
//!   `histogram_quantile()` work on the Pushgateway's series as on a
//!   daemon's.
//!
//! The process's own series (`build_info`, `dry_run`) go once per run to the
//! group `job="seatflow-reconciler"` (no `kind`), so one CronJob counts as
//! one reconciler, not five. `process_*` is not pushed: a short-lived pod's
//! CPU and memory, kept by the Pushgateway forever, would mislead.

use std::collections::BTreeMap;

use prometheus::proto::{MetricFamily, MetricType};

use crate::config::redact_url;
use crate::metrics::Metrics;
use crate::model::Kind;
use crate::run::jobs::report::{JobReport, Outcome};

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

/// What the Pushgateway holds of one counter or histogram series. Gauges
/// are not read back: each run sets its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Held {
    Counter(f64),
    /// Cumulative bucket counts by upper bound (`+Inf` left out: it is the count).
    Histogram {
        count: u64,
        sum: f64,
        buckets: Vec<(f64, u64)>,
    },
}

/// One held series: its family, every label (the group's grouping labels
/// included, empty values left out) and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldSeries {
    pub family: String,
    pub labels: BTreeMap<String, String>,
    pub held: Held,
}

/// The counters and histograms the Pushgateway holds, from its JSON API
/// (`GET /api/v1/metrics`). Reading the structured API instead of the text
/// exposition leaves no text format to parse by hand (escaping, `NaN`,
/// timestamps, exemplars are the Pushgateway's business). A series that
/// does not read as a number is left out: this run then starts it afresh,
/// which Prometheus reads as a counter reset.
pub fn held_from_api(body: &serde_json::Value) -> Vec<HeldSeries> {
    let number = |v: &serde_json::Value| v.as_str().and_then(|v| v.parse::<f64>().ok());
    let mut out = Vec::new();
    for group in body["data"].as_array().into_iter().flatten() {
        let Some(families) = group.as_object() else {
            continue;
        };
        for (name, family) in families {
            let kind = family["type"].as_str().unwrap_or_default();
            for m in family["metrics"].as_array().into_iter().flatten() {
                let held = match kind {
                    "COUNTER" => number(&m["value"]).map(Held::Counter),
                    "HISTOGRAM" => histogram_from_api(m),
                    _ => None,
                };
                let Some(held) = held else { continue };
                let mut labels = BTreeMap::new();
                for source in [&group["labels"], &m["labels"]] {
                    for (k, v) in source.as_object().into_iter().flatten() {
                        if let Some(v) = v.as_str().filter(|v| !v.is_empty()) {
                            labels.insert(k.clone(), v.to_string());
                        }
                    }
                }
                out.push(HeldSeries {
                    family: name.clone(),
                    labels,
                    held,
                });
            }
        }
    }
    out
}

fn histogram_from_api(m: &serde_json::Value) -> Option<Held> {
    let count = m["count"].as_str()?.parse::<u64>().ok()?;
    let sum = m["sum"].as_str()?.parse::<f64>().ok()?;
    let mut buckets = Vec::new();
    for (le, n) in m["buckets"].as_object()? {
        let le: f64 = le.parse().ok()?;
        if le.is_finite() {
            buckets.push((le, n.as_str()?.parse::<u64>().ok()?));
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    Some(Held::Histogram {
        count,
        sum,
        buckets,
    })
}

/// Adds what the Pushgateway holds for `kind`'s group to this run's
/// counters and histograms, so that every pushed counter and histogram goes
/// on across runs as a daemon's does (`rate()`, `increase()` and
/// `histogram_quantile()` work on the Pushgateway's series). A series is
/// matched on its family and labels; a histogram only when its bucket bounds
/// are this build's (else it starts afresh, read by Prometheus as a reset).
pub fn continue_from(families: &mut [MetricFamily], kind: Kind, held: &[HeldSeries]) {
    let k = kind.label();
    let ours = |h: &&HeldSeries| {
        h.labels.get("job").map(String::as_str) == Some(PUSH_JOB)
            && h.labels.get("kind").map(String::as_str) == Some(k)
    };
    for family in families.iter_mut() {
        let name = family.name().to_string();
        let kind_of_family = family.get_field_type();
        for metric in family.mut_metric().iter_mut() {
            let labels: BTreeMap<&str, &str> = metric
                .get_label()
                .iter()
                .map(|l| (l.name(), l.value()))
                .collect();
            // The held series has the metric's labels plus the group's `job`.
            let same_series = |h: &&HeldSeries| {
                h.family == name
                    && h.labels.len() == labels.len() + 1
                    && labels
                        .iter()
                        .all(|(n, v)| h.labels.get(*n).map(String::as_str) == Some(*v))
            };
            let Some(previous) = held.iter().filter(ours).find(same_series) else {
                continue;
            };
            match (&previous.held, kind_of_family) {
                (Held::Counter(v), MetricType::COUNTER) if *v >= 0.0 => {
                    let mut c = metric.get_counter().clone();
                    c.set_value(c.get_value() + v);
                    metric.set_counter(c);
                }
                (
                    Held::Histogram {
                        count,
                        sum,
                        buckets,
                    },
                    MetricType::HISTOGRAM,
                ) => {
                    let mut h = metric.get_histogram().clone();
                    let bounds = h.get_bucket().iter().map(|b| b.upper_bound());
                    if !bounds.eq(buckets.iter().map(|b| b.0)) {
                        continue;
                    }
                    h.set_sample_count(h.get_sample_count() + count);
                    h.set_sample_sum(h.get_sample_sum() + sum);
                    let added = h
                        .get_bucket()
                        .iter()
                        .zip(buckets)
                        .map(|(bucket, (_, n))| {
                            let mut b = bucket.clone();
                            b.set_cumulative_count(bucket.cumulative_count() + n);
                            b
                        })
                        .collect();
                    h.set_bucket(added);
                    metric.set_histogram(h);
                }
                _ => {}
            }
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

/// A failed request in full: reqwest's own words ("error sending request")
/// and every cause under them ("connection refused"), without the URL
/// (the caller names the Pushgateway, its password redacted).
fn why(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut out = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// Pushes every job of a run to its group.
pub async fn push_runs(
    base: &str,
    reports: &[JobReport],
    deviations: &[crate::run::jobs::deviations::DeviationReport],
) -> anyhow::Result<()> {
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
            held_from_api(&body)
        }
        Ok(r) => anyhow::bail!("{where_} answered {} to GET /api/v1/metrics", r.status()),
        Err(e) => anyhow::bail!("{where_}: {}", why(e)),
    };
    let process = Metrics::new();
    process.set_dry_run(reports.iter().any(|r| r.dry_run));
    process.show_contract(deviations);
    let mut pushes = vec![(
        process_push_url(base),
        Metrics::encode_families(&process_families(&process)),
    )];
    for report in reports {
        let metrics = Metrics::new();
        metrics.record(report);
        let mut families = families_for_push(&metrics, report);
        continue_from(&mut families, report.kind, &previous);
        pushes.push((
            push_url(base, report.kind),
            Metrics::encode_families(&families),
        ));
    }
    for (url, body) in pushes {
        let response = client
            .post(url)
            .header("Content-Type", "text/plain; version=0.0.4")
            .body(body)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{where_}: {}", why(e)))?;
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
        let previous = held_from_api(&api);
        assert_eq!(previous.len(), 4, "{previous:?}");
        let mut r = JobReport::new(Kind::OrphanLocks);
        r.fixed = 2;
        r.fail(&crate::error::Error::Protocol("down".into()));
        r.scanned = 1;
        r.finish();
        let m = Metrics::new();
        m.record(&r);
        let mut families = families_for_push(&m, &r);
        continue_from(&mut families, Kind::OrphanLocks, &previous);
        let text = Metrics::encode_families(&families);
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

    /// The families as the Pushgateway's JSON API shows them once pushed to
    /// `kind`'s group (the shape `held_from_api` reads).
    fn as_the_api_shows(families: &[MetricFamily], kind: Kind) -> serde_json::Value {
        let mut group = serde_json::Map::new();
        group.insert(
            "labels".into(),
            serde_json::json!({"job": PUSH_JOB, "kind": kind.label()}),
        );
        for f in families {
            let metrics: Vec<serde_json::Value> = f
                .get_metric()
                .iter()
                .map(|m| {
                    let mut labels: serde_json::Map<String, serde_json::Value> = m
                        .get_label()
                        .iter()
                        .map(|l| (l.name().to_string(), l.value().into()))
                        .collect();
                    labels.insert("instance".into(), "".into());
                    labels.insert("job".into(), PUSH_JOB.into());
                    let mut out = serde_json::json!({ "labels": labels });
                    match f.get_field_type() {
                        MetricType::COUNTER => {
                            out["value"] = m.get_counter().get_value().to_string().into()
                        }
                        MetricType::GAUGE => {
                            out["value"] = m.get_gauge().get_value().to_string().into()
                        }
                        MetricType::HISTOGRAM => {
                            let h = m.get_histogram();
                            let mut buckets: serde_json::Map<String, serde_json::Value> = h
                                .get_bucket()
                                .iter()
                                .map(|b| {
                                    (
                                        b.upper_bound().to_string(),
                                        b.cumulative_count().to_string().into(),
                                    )
                                })
                                .collect();
                            buckets.insert("+Inf".into(), h.get_sample_count().to_string().into());
                            out["buckets"] = buckets.into();
                            out["count"] = h.get_sample_count().to_string().into();
                            out["sum"] = h.get_sample_sum().to_string().into();
                        }
                        _ => {}
                    }
                    out
                })
                .collect();
            let kind = format!("{:?}", f.get_field_type());
            group.insert(
                f.name().to_string(),
                serde_json::json!({"type": kind, "metrics": metrics}),
            );
        }
        serde_json::json!({"status": "success", "data": [group]})
    }

    fn histogram(families: &[MetricFamily], name: &str) -> (u64, f64, Vec<(f64, u64)>) {
        let f = families.iter().find(|f| f.name() == name).unwrap();
        let h = f.get_metric()[0].get_histogram();
        let buckets = h
            .get_bucket()
            .iter()
            .map(|b| (b.upper_bound(), b.cumulative_count()))
            .collect();
        (h.get_sample_count(), h.get_sample_sum(), buckets)
    }

    #[test]
    fn histograms_continue_across_pushes_like_counters() {
        let kind = Kind::SoldOrphans;
        // Three runs, each pushed on top of what the previous left.
        let runs: [(u64, &[u64]); 3] = [(250, &[2_000]), (1_500, &[]), (40, &[150_000, 400_000])];
        let mut gateway = serde_json::json!({"data": []});
        let mut pushed = Vec::new();
        for (duration_ms, ages) in runs {
            let mut r = JobReport::new(kind);
            r.fixed = ages.len() as u64;
            for ms in ages {
                r.observe_drift_age(*ms);
            }
            r.finish();
            r.duration_ms = duration_ms;
            let m = Metrics::new();
            m.record(&r);
            let mut families = families_for_push(&m, &r);
            continue_from(&mut families, kind, &held_from_api(&gateway));
            gateway = as_the_api_shows(&families, kind);
            pushed = families;
        }
        let (count, sum, buckets) = histogram(&pushed, "seatflow_reconcile_run_duration_seconds");
        assert_eq!(count, 3, "three runs");
        assert!((sum - 1.79).abs() < 1e-9, "0.25 + 1.5 + 0.04 s: {sum}");
        let le = |b: f64| buckets.iter().find(|(u, _)| *u == b).unwrap().1;
        assert_eq!((le(0.05), le(0.25), le(1.0), le(2.5)), (1, 2, 2, 3));

        let (count, sum, buckets) = histogram(&pushed, "seatflow_reconcile_drift_age_seconds");
        assert_eq!(count, 3, "three repairs over the runs");
        assert!((sum - 552.0).abs() < 1e-9, "{sum}");
        let le = |b: f64| buckets.iter().find(|(u, _)| *u == b).unwrap().1;
        assert_eq!(
            (le(1.0), le(5.0), le(180.0), le(300.0), le(600.0)),
            (0, 1, 2, 2, 3)
        );

        let fixes = pushed
            .iter()
            .find(|f| f.name() == "seatflow_reconcile_fixes_total")
            .unwrap();
        assert_eq!(fixes.get_metric()[0].get_counter().get_value(), 3.0);
    }

    #[test]
    fn a_histogram_with_other_bounds_starts_afresh() {
        let api = serde_json::json!({"data": [{
            "labels": {"job": PUSH_JOB, "kind": "orphan_locks"},
            "seatflow_reconcile_run_duration_seconds": {"type": "HISTOGRAM", "metrics": [
                {"labels": {"instance": "", "job": PUSH_JOB, "kind": "orphan_locks"},
                 "buckets": {"1": "4", "+Inf": "5"}, "count": "5", "sum": "9"}
            ]}
        }]});
        let mut r = JobReport::new(Kind::OrphanLocks);
        r.finish();
        let m = Metrics::new();
        m.record(&r);
        let mut families = families_for_push(&m, &r);
        continue_from(&mut families, Kind::OrphanLocks, &held_from_api(&api));
        let (count, _, _) = histogram(&families, "seatflow_reconcile_run_duration_seconds");
        assert_eq!(count, 1, "an older build's buckets are not added up");
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
