//! A daemon in process on a small estate, the way the change-source tests
//! use it (and the Redis Cluster and least-privilege tests after them): its
//! schedules a year away, one pass started by hand through the admin
//! endpoint (which makes it its shard's active replica), then waits on what
//! it does: a seat's value, the keyspace-events probe, the binlog reader.

use std::time::Duration;

use seatflow_reconciler::config::Settings;

use crate::TestEnv;
use crate::daemon::{InProcessDaemon, metric_reaches, sample};
use crate::servers::{PrivateServer, binlog_dumps_become};

pub const TOKEN: &str = "changes-test-token";

/// The same on `showtimes` ON_SALE showtimes of one 1×4 hall, warmed and
/// consistent, with `tweak` applied to the settings (which may point them
/// at a Redis Cluster: `cluster.rs`).
pub async fn daemon_on_estate(
    redis: Option<&PrivateServer>,
    showtimes: i64,
    tweak: impl FnOnce(&mut Settings),
) -> (TestEnv, InProcessDaemon) {
    let env = estate(redis, showtimes, tweak).await;
    let daemon = after_a_first_pass(&env).await;
    (env, daemon)
}

/// A daemon on `env`, once a first pass (started through the admin
/// endpoint) has run.
pub async fn after_a_first_pass(env: &TestEnv) -> InProcessDaemon {
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    let (code, _) = post(&daemon, "/jobs/paid_seats/run").await;
    assert_eq!(code, 202, "the admin endpoint starts a pass");
    daemon
        .status_when("the first pass ran", |s| {
            s["pass"]["shards"]["0"]["last_fire"] == "ran"
        })
        .await;
    daemon
}

/// The environment of [`daemon_on_estate`], before any daemon: schedules a
/// year away, the estate warmed and consistent.
pub async fn estate(
    redis: Option<&PrivateServer>,
    showtimes: i64,
    tweak: impl FnOnce(&mut Settings),
) -> TestEnv {
    estate_on(&crate::mysql_base_url(), redis, showtimes, tweak).await
}

/// [`estate`] with its database on the MySQL server at `mysql` (a private
/// one).
pub async fn estate_on(
    mysql: &str,
    redis: Option<&PrivateServer>,
    showtimes: i64,
    tweak: impl FnOnce(&mut Settings),
) -> TestEnv {
    let url = redis.map(|r| format!("redis://127.0.0.1:{}", r.port()));
    let env = TestEnv::on(mysql, |s| {
        if let Some(url) = url {
            s.redis.url = seatflow_reconciler::config::SecretUrl::new(url);
        }
        s.set_schedule(seatflow_reconciler::model::Kind::PaidSeats, "0 0 0 1 1 *");
        s.set_schedule(
            seatflow_reconciler::model::Kind::ExpiredOrders,
            "0 0 0 1 1 *",
        );
        s.reconcile.expired_order_buffer = Duration::from_secs(1);
        s.http.admin_token = seatflow_reconciler::config::Secret::new(TOKEN);
        tweak(s);
    })
    .await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    for showtime in 1..=showtimes {
        env.fx.showtime(showtime, 1, 60, "ON_SALE").await.unwrap();
        env.fx.warm_all(showtime, &seats, &[]).await.unwrap();
    }
    env
}

/// Waits until the probe finds the server's keyspace notifications on.
pub async fn events_on(daemon: &InProcessDaemon) {
    daemon
        .status_when("the probe finds events on", |s| {
            s["changes"]["redis_events"] == "on"
        })
        .await;
}

pub async fn post(daemon: &InProcessDaemon, path: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(daemon.url(path))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Waits until seat `seat` of `showtime` reads `value` in Redis (`what`).
pub async fn seat_becomes(env: &TestEnv, showtime: i64, seat: &str, value: &str, what: &str) {
    crate::servers::wait_until(what, Duration::from_secs(60), || async {
        env.fx.seat_value(showtime, seat).await.unwrap().as_deref() == Some(value)
    })
    .await;
}

pub fn found(kind: &str, by: &str) -> (String, String) {
    (kind.to_string(), by.to_string())
}

/// The events gauge says off, and not on.
pub async fn events_gauge_says_off(daemon: &InProcessDaemon) {
    let m = metric_reaches(
        daemon,
        r#"seatflow_reconcile_redis_events{state="off"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(&m, r#"seatflow_reconcile_redis_events{state="on"}"#),
        0.0
    );
}

/// A daemon reading the binlog of a private MariaDB (`changes.mysql_binlog`),
/// with keyspace events off and `grace`, on two showtimes; each has an
/// order PENDING on one seat, locked in Redis. Returns once its first pass
/// ran and the binlog is being read.
pub async fn daemon_on_binlog(
    server: &PrivateServer,
    grace: Duration,
) -> (TestEnv, InProcessDaemon, [i64; 2]) {
    let base = crate::servers::root_url(server);
    let env = estate_on(&base, None, 2, |s| {
        s.reconcile.orphan_grace = grace;
        s.changes.redis_events = seatflow_reconciler::config::RedisEvents::Off;
        s.changes.mysql_binlog = true;
        s.changes.mysql_settle = Duration::from_secs(1);
    })
    .await;
    let mut orders = [0; 2];
    for (i, (showtime, seat)) in [(1, "A-1"), (2, "A-2")].into_iter().enumerate() {
        orders[i] = env
            .fx
            .order(showtime, "PENDING", &[seat], 600)
            .await
            .unwrap();
        env.fx.warm(showtime, &[(seat, "1")]).await.unwrap();
    }
    let daemon = after_a_first_pass(&env).await;
    binlog_dumps_become(&env, 1).await;
    (env, daemon, orders)
}
