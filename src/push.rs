//! `once --pushgateway URL`: push a run's metrics with push-add semantics
//! (HTTP POST), so a failed run does not erase the last-success gauge.
//! The grouping key is the job name only, never `instance`, so successive
//! CronJob pods update one group instead of piling up.

use crate::config::redact_url;
use crate::metrics::Metrics;

/// The Pushgateway grouping key: `job="seatflow-reconciler"`.
pub const PUSH_JOB: &str = "seatflow-reconciler";

pub fn push_url(base: &str) -> String {
    format!("{}/metrics/job/{PUSH_JOB}", base.trim_end_matches('/'))
}

pub async fn push_add(base: &str, metrics: &Metrics) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let response = client
        .post(push_url(base))
        .header("Content-Type", "text/plain; version=0.0.4")
        .body(metrics.encode())
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{}: {}", redact_url(base), e.without_url()))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        anyhow::bail!("{} answered {status}: {}", redact_url(base), body.trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn grouping_key_has_no_instance() {
        assert_eq!(
            super::push_url("http://pgw:9091/"),
            "http://pgw:9091/metrics/job/seatflow-reconciler"
        );
    }
}
