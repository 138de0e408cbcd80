//! Bad data is reported once per run by one job, summarised per showtime,
//! values cut short: log volume stays bounded whatever the data.

use std::process::Command;

use seatflow_reconciler::model::Kind;
use seatflow_test_support::TestEnv;

#[tokio::test]
async fn one_bad_value_is_one_invalid_data_error_whichever_jobs_run() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 10, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "7")]).await.unwrap();

    let report = env.once(&Kind::ALL).await;
    let total: u64 = report.jobs.iter().map(|j| j.invalid_data).sum();
    assert_eq!(total, 1, "{report:?}");
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("7"),
        "left alone"
    );
}

#[tokio::test]
async fn a_flood_of_bad_data_logs_a_bounded_summary() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    // 60 showtimes with bad data; one of them has 5,000 unknown fields and
    // a 1 MB value.
    for id in 1..=60 {
        env.fx.showtime(id, 1, 10 + id, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &seats, &[("A-1", "9")]).await.unwrap();
    }
    let key = env.ctx.redis.keys.seat(1);
    let mut junk = redis::cmd("HSET");
    junk.arg(&key);
    for i in 0..5_000 {
        junk.arg(format!("JUNK-{i}")).arg("0");
    }
    junk.arg("A-2").arg("x".repeat(1 << 20));
    let _: i64 = env.redis(&junk).await;

    let out = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"))
        .args(["once", "--output", "json"])
        .env("SEATFLOW__MYSQL__URL", &env.db_url)
        .env("SEATFLOW__REDIS__URL", seatflow_test_support::redis_url())
        .env("SEATFLOW__REDIS__KEY_PREFIX", &env.prefix)
        .env("SEATFLOW__LOG__LEVEL", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let counted: u64 = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["invalid_data"].as_u64().unwrap_or(0))
        .sum();
    // 60 bad values, 5,000 unknown fields, one huge value: all counted ...
    assert_eq!(counted, 60 + 5_000 + 1, "{report}");
    // ... but logged as at most one line per showtime for a bounded number of
    // showtimes, plus a closing count, without the huge value.
    let lines = stderr
        .lines()
        .filter(|l| l.contains("invalid data"))
        .count();
    assert!(lines <= 25, "{lines} lines:\n{stderr}");
    assert!(stderr.len() < 20_000, "{} bytes of log", stderr.len());
    assert!(stderr.contains("more showtimes than logged"), "{stderr}");
}
