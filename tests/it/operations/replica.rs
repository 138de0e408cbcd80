//! `mysql.replica_url`: a pass's bulk reads on a replica (a private primary
//! and replica, MariaDB replication between them). The reads land on the
//! replica; with the replica behind, nothing the primary holds is lowered
//! and nothing it freed is raised (every write is confirmed on the
//! primary); a stopped, lagging, unreachable or non-replica server is read
//! from the primary instead, counted by why. (That a check never reads the
//! replica is `jobs::request`'s unit test.)

use std::time::Duration;

use seatflow_reconciler::config::{SecretUrl, Settings};
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::run::context::Context;
use seatflow_reconciler::run::jobs::RunOptions;
use seatflow_test_support::daemon::{metric_reaches_at_least, sample};
use seatflow_test_support::estate::{after_a_first_pass, estate_on};
use seatflow_test_support::servers::{
    PrivateServer, delay_replica, mariadb_with_replica, replica_caught_up, replicate, root_url,
    wait_until,
};
use seatflow_test_support::{DbUser, TestEnv, ended_well, run, seat};

/// The seat jobs and missing-hashes: a pass's jobs.
const PASS: [Kind; 4] = [
    Kind::PaidSeats,
    Kind::MissingHashes,
    Kind::OrphanLocks,
    Kind::SoldOrphans,
];

/// A run as a pass makes it: bulk reads may go to the replica.
fn pass_options() -> RunOptions {
    RunOptions {
        replica_reads: true,
        ..RunOptions::default()
    }
}

/// The test's database on `primary`, its replica URL the same database on
/// `replica`, with `max_lag`.
async fn env_on(primary: &PrivateServer, replica_url: String, max_lag: Duration) -> TestEnv {
    TestEnv::on(&root_url(primary), |s| {
        read_from(s, &replica_url);
        s.mysql.max_replica_lag = max_lag;
    })
    .await
}

/// `mysql.replica_url`: the settings' own database on the server at
/// `replica_base`.
fn read_from(s: &mut Settings, replica_base: &str) {
    let db = s.mysql.url.expose().rsplit('/').next().unwrap().to_string();
    s.mysql.replica_url = SecretUrl::new(format!("{replica_base}/{db}"));
}

/// `/status`'s `mysql_replica` of a context with a replica.
fn replica_status(ctx: &Context) -> serde_json::Value {
    ctx.replica.as_ref().unwrap().status()
}

/// The replica's chunks counted under `server/reason` in `/status`.
fn chunks(env: &TestEnv, key: &str) -> u64 {
    replica_status(&env.ctx)["chunks"][key].as_u64().unwrap()
}

/// How many statements a server has run (`Com_select`, all sessions).
async fn selects(server: &PrivateServer) -> u64 {
    use sqlx::Connection as _;
    use sqlx::Row as _;
    let mut conn = sqlx::MySqlConnection::connect(&root_url(server))
        .await
        .unwrap();
    let row = sqlx::raw_sql("SHOW GLOBAL STATUS LIKE 'Com_select'")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.ok();
    let value: String = row
        .try_get::<String, _>(1)
        .or_else(|_| {
            row.try_get::<Vec<u8>, _>(1)
                .map(|b| String::from_utf8(b).unwrap())
        })
        .unwrap();
    value.parse().unwrap()
}

fn drift_of(report: &seatflow_reconciler::run::jobs::report::RunReport, kind: Kind) -> (u64, u64) {
    let job = report.jobs.iter().find(|j| j.kind == kind).unwrap();
    (job.drift, job.fixed)
}

#[tokio::test]
async fn a_replica_behind_the_primary_is_read_but_every_write_is_the_primarys() {
    let (primary, replica) = mariadb_with_replica().await;
    // A limit the replica stays within while it holds changes back.
    let env = env_on(&primary, root_url(&replica), Duration::from_secs(3600)).await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    for id in [10, 20, 30] {
        env.fx.showtime(id, 1, 120, "ON_SALE").await.unwrap();
    }
    // Before the replica falls behind: a paid seat in 20 and in 30, and a
    // lock of no order in 20 (drift both servers see).
    let refunded = env.fx.order(20, "PAID", &["A-1"], 900).await.unwrap();
    let refunded_in_30 = env.fx.order(30, "PAID", &["A-1"], 900).await.unwrap();
    env.fx.warm_all(10, &seats, &[]).await.unwrap();
    env.fx
        .warm_all(20, &seats, &[("A-1", "2"), ("A-3", "1")])
        .await
        .unwrap();
    replica_caught_up(&primary, &replica).await;

    // The replica holds every later change back for an hour, and reports a
    // lag within the limit meanwhile: a chunk reads it.
    delay_replica(&replica, 3600).await;
    // On the primary only: two customers' seats in 10 (held and paid; the
    // replica has neither order), the seat of 20 refunded and freed, and
    // 30's paid seat refunded with its hash lost.
    env.fx.order(10, "PENDING", &["A-1"], 900).await.unwrap();
    env.fx.order(10, "PAID", &["A-2"], 900).await.unwrap();
    env.fx
        .warm(10, &[("A-1", "1"), ("A-2", "2")])
        .await
        .unwrap();
    assert!(env.fx.refund(refunded).await.unwrap());
    env.fx.warm(20, &[("A-1", "0")]).await.unwrap();
    assert!(env.fx.refund(refunded_in_30).await.unwrap());
    // And the hall's last seat taken out of sale: the replica's template
    // still has it.
    env.sql("UPDATE hall_seat SET enabled = 0 WHERE hall_id = 1 AND seat_no = 'A-4'")
        .await;

    let replica_selects = selects(&replica).await;
    let report = run(&env.ctx, &PASS, pass_options()).await;
    ended_well(&report);

    // The bulk reads landed on the replica.
    assert!(chunks(&env, "replica/current") >= 1, "{}", report.to_text());
    assert!(selects(&replica).await > replica_selects);
    // What the replica showed as drift the primary refused: the held and
    // the paid seat (no order on the replica) are not lowered, the freed
    // seat (still paid on the replica) is not raised.
    assert_eq!(seat(&env, 10, "A-1").await.as_deref(), Some("1"));
    assert_eq!(seat(&env, 10, "A-2").await.as_deref(), Some("2"));
    assert_eq!(seat(&env, 20, "A-1").await.as_deref(), Some("0"));
    // The replica did show them: found, and not repaired.
    assert_eq!(
        drift_of(&report, Kind::OrphanLocks),
        (2, 1),
        "{}",
        report.to_text()
    );
    assert_eq!(
        drift_of(&report, Kind::SoldOrphans),
        (1, 0),
        "{}",
        report.to_text()
    );
    assert_eq!(
        drift_of(&report, Kind::PaidSeats),
        (1, 0),
        "{}",
        report.to_text()
    );
    // Drift both servers see is repaired; the lost hash is rebuilt from
    // the primary's template and rows (three seats, the refunded one free).
    assert_eq!(seat(&env, 20, "A-3").await.as_deref(), Some("0"));
    let rebuilt = env.fx.hash(30).await.unwrap();
    assert_eq!(rebuilt.len(), 3, "{rebuilt:?}");
    assert!(rebuilt.values().all(|v| v == "0"), "{rebuilt:?}");
}

#[tokio::test]
async fn a_stopped_or_lagging_replica_is_read_from_the_primary_and_counted() {
    let (primary, replica) = mariadb_with_replica().await;
    let env = env_on(&primary, root_url(&replica), Duration::from_secs(1)).await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(10, 1, 120, "ON_SALE").await.unwrap();
    env.fx.warm_all(10, &seats, &[]).await.unwrap();
    replica_caught_up(&primary, &replica).await;

    // Stopped: its SQL thread applies nothing. A seat paid on the primary
    // whose Redis step was lost is found: the chunk read the primary.
    replicate(&replica, "STOP SLAVE SQL_THREAD").await;
    env.fx.order(10, "PAID", &["A-1"], 900).await.unwrap();
    let report = run(&env.ctx, &PASS, pass_options()).await;
    ended_well(&report);
    assert_eq!(seat(&env, 10, "A-1").await.as_deref(), Some("2"));
    assert!(chunks(&env, "primary/stopped") >= 1);
    assert_eq!(chunks(&env, "replica/current"), 0);

    // Lagging: it applies each change an hour late, and says so.
    delay_replica(&replica, 3600).await;
    env.fx.order(10, "PAID", &["A-2"], 900).await.unwrap();
    let lag = |env: &TestEnv| {
        let replica = env.ctx.replica.as_ref().unwrap().clone();
        async move {
            use seatflow_reconciler::store::mysql::ReplicaReport;
            matches!(
                replica.store().replica_report().await,
                Ok(ReplicaReport::Replicating { lag_seconds: Some(lag), .. }) if lag > 1
            )
        }
    };
    wait_until(
        "the replica reports a lag above 1 s",
        Duration::from_secs(30),
        || lag(&env),
    )
    .await;
    let report = run(&env.ctx, &PASS, pass_options()).await;
    ended_well(&report);
    assert_eq!(seat(&env, 10, "A-2").await.as_deref(), Some("2"));
    assert!(chunks(&env, "primary/lagging") >= 1);
    assert_eq!(chunks(&env, "replica/current"), 0);
    let status = replica_status(&env.ctx);
    assert_eq!(status["last"]["reason"], "lagging", "{status}");
    assert_eq!(status["last"]["reads"], "primary", "{status}");
}

#[tokio::test]
async fn a_replica_that_is_down_or_no_replica_is_a_fallback_not_a_failed_pass() {
    // Nothing listens on the port: unreachable, then resting.
    let closed = seatflow_test_support::servers::free_port();
    let env = TestEnv::with(|s| {
        s.mysql.replica_url = SecretUrl::new(format!("mysql://root@127.0.0.1:{closed}/none"));
    })
    .await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(10, 1, 120, "ON_SALE").await.unwrap();
    env.fx.order(10, "PAID", &["A-1"], 900).await.unwrap();
    env.fx.warm_all(10, &seats, &[("A-2", "1")]).await.unwrap();
    let report = run(&env.ctx, &PASS, pass_options()).await;
    ended_well(&report);
    assert_eq!(seat(&env, 10, "A-1").await.as_deref(), Some("2"));
    assert_eq!(seat(&env, 10, "A-2").await.as_deref(), Some("0"));
    assert_eq!(chunks(&env, "primary/unreachable"), 1);
    // Why is kept: the refused connection, not the pool's timeout.
    let last = &replica_status(&env.ctx)["last"];
    let error = last["error"].as_str().unwrap_or_else(|| panic!("{last}"));
    assert!(error.to_lowercase().contains("refused"), "{last}");
    // The next chunk within the rest does not wait for it again.
    run(&env.ctx, &PASS, pass_options()).await;
    assert_eq!(chunks(&env, "primary/unreachable"), 1);
    assert!(chunks(&env, "primary/resting") >= 1);

    // A server that replicates nothing (the test's own MariaDB).
    let env = TestEnv::with(|s| s.mysql.replica_url = s.mysql.url.clone()).await;
    env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(10, 1, 120, "ON_SALE").await.unwrap();
    let report = run(&env.ctx, &PASS, pass_options()).await;
    ended_well(&report);
    assert_eq!(chunks(&env, "primary/not_a_replica"), 1);
    assert_eq!(chunks(&env, "replica/current"), 0);
}

#[tokio::test]
async fn the_daemon_shows_where_its_passes_read() {
    let (primary, replica) = mariadb_with_replica().await;
    let replica_base = root_url(&replica);
    let env = estate_on(&root_url(&primary), None, 3, |s| {
        read_from(s, &replica_base)
    })
    .await;
    replica_caught_up(&primary, &replica).await;
    let daemon = after_a_first_pass(&env).await;
    let status = daemon
        .status_when("a pass read the replica", |s| {
            s["mysql_replica"]["chunks"]["replica/current"].as_u64() >= Some(1)
        })
        .await;
    let replica_status = &status["mysql_replica"];
    assert_eq!(replica_status["max_lag_seconds"], 5, "{replica_status}");
    assert_eq!(
        replica_status["last"]["reads"], "replica",
        "{replica_status}"
    );
    assert_eq!(replica_status["last"]["lag_seconds"], 0, "{replica_status}");
    // A pass outside the schedule (the admin's) is judged by the schedule's
    // cadence too: capacity is known from the first pass on.
    let status = daemon
        .status_when("the pass is measured", |s| {
            !s["capacity"]["showtimes_per_shard"].is_null()
        })
        .await;
    assert_eq!(status["capacity"]["shards_for_estate"], 1, "{status}");
    let exposition = metric_reaches_at_least(
        &daemon,
        r#"seatflow_reconcile_bulk_reads_total{reason="current",server="replica"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(
            &exposition,
            r#"seatflow_reconcile_bulk_reads_total{reason="lagging",server="primary"}"#
        ),
        0.0
    );
    assert_eq!(
        sample(&exposition, "seatflow_reconcile_replica_lag_seconds"),
        0.0
    );
    daemon.stop().await;
}

#[tokio::test]
async fn the_replica_user_needs_slave_monitor_to_report_its_lag() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(10, 1, 120, "ON_SALE").await.unwrap();
    let suffix = &env.db["sf_test_".len()..];
    let select = |name: &str| format!("GRANT SELECT ON `{}`.* TO '{name}'@'%'", env.db);
    let (bare, monitor) = (format!("sf_ro_{suffix}"), format!("sf_mon_{suffix}"));
    let bare = DbUser::create(&env, &bare, &[select(&bare)]).await;
    let grant = format!("GRANT SLAVE MONITOR ON *.* TO '{monitor}'@'%'");
    let monitor = DbUser::create(&env, &monitor, &[select(&monitor), grant]).await;
    // Without SLAVE MONITOR the lag cannot be asked: the primary is read,
    // and the refusal is listed as any other (rule 18). With it, the
    // server answers (it replicates nothing).
    for (user, reads) in [
        (&bare, "primary/denied"),
        (&monitor, "primary/not_a_replica"),
    ] {
        let mut settings = (*env.ctx.settings).clone();
        settings.mysql.replica_url = SecretUrl::new(user.url(&env));
        let ctx = Context::connect(settings).await.unwrap();
        let report = run(&ctx, &PASS, pass_options()).await;
        ended_well(&report);
        let status = replica_status(&ctx);
        assert_eq!(status["chunks"][reads], 1, "{status}");
        let denied = ctx.denials.to_json();
        assert_eq!(
            denied.to_string().contains("SLAVE MONITOR"),
            reads == "primary/denied",
            "{denied}"
        );
        // Named as the replica's refusal, not the primary's.
        for entry in denied.as_array().unwrap() {
            assert_eq!(entry["store"], "mysql_replica", "{denied}");
        }
    }
}
