//! Change-driven checks between passes: a Redis keyspace notification or the
//! end of a grace period gets a showtime checked within seconds, by the
//! pass's own code, with no pass in between (the schedule here fires once a
//! year; the one pass is started by the admin endpoint, to make this
//! replica its shard's active one).

use std::time::Duration;

use futures_util::StreamExt;
use seatflow_reconciler::daemon::change_state::events::{Channels, Message, OwnWrites};
use seatflow_reconciler::daemon::change_state::queue::Source;
use seatflow_reconciler::model::{Kind, SeatState};
use seatflow_reconciler::run::jobs::{self, RunRequest, Trigger};
use seatflow_reconciler::store::redis::Fenced;
use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::{
    InProcessDaemon, metric_reaches, metric_reaches_at_least, metrics, pass_runs, sample,
};
use seatflow_test_support::estate::{
    daemon_on_binlog, daemon_on_estate, estate, estate_on, events_gauge_says_off, events_on, found,
    post, seat_becomes,
};
use seatflow_test_support::own_keys::release_locks;
use seatflow_test_support::servers::{
    self, PrivateServer, binlog_dumps, binlog_dumps_become, wait_until,
};
use tokio_util::sync::CancellationToken;

/// A daemon on `redis` (the shared one when None) whose pass fires once a
/// year, with `grace`; returns it once its first pass (started by hand) ran.
async fn daemon_after_one_pass(
    redis: Option<&PrivateServer>,
    grace: Duration,
) -> (TestEnv, InProcessDaemon) {
    daemon_on_estate(redis, 2, |s| s.reconcile.orphan_grace = grace).await
}

/// [`daemon_after_one_pass`] on a private Redis with keyspace events on,
/// once the probe finds them on (the server is returned: keep it alive).
async fn daemon_with_events(grace: Duration) -> (PrivateServer, TestEnv, InProcessDaemon) {
    let redis = servers::redis_with_keyspace_events();
    let (env, daemon) = daemon_after_one_pass(Some(&redis), grace).await;
    events_on(&daemon).await;
    (redis, env, daemon)
}

/// `/metrics` once no check waits or runs.
async fn when_the_queue_is_idle(daemon: &InProcessDaemon) -> String {
    daemon
        .status_when("the queue is idle", |s| {
            s["changes"]["queue_depth"] == 0 && s["changes"]["in_flight"] == 0
        })
        .await;
    metrics(daemon).await
}

/// A seat locked with no order (a crash between the hold and the order) is
/// released seconds after the hold, on the notification of its `HSET`.
#[tokio::test]
async fn an_orphan_lock_is_released_on_its_keyspace_event_without_a_pass() {
    let (_redis, env, daemon) = daemon_with_events(Duration::ZERO).await;

    env.fx.warm(2, &[("A-3", "1")]).await.unwrap();
    seat_becomes(&env, 2, "A-3", "0", "the orphan lock is released").await;
    let m = metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_fixes_total{kind="orphan_locks",source="event"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(&m, r#"seatflow_reconcile_redis_events{state="on"}"#),
        1.0
    );
    assert!(sample(&m, "seatflow_reconcile_change_events_total") >= 1.0);
    // The check is a run of its own, audited like any, with what asked for it.
    let audit = env.audit().await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(env.found_by().await, [found("seat_released", "event")]);
    // The release's own write is an event too, told ours by its script's
    // bracket: no second check (it would find nothing).
    metric_reaches(&daemon, "seatflow_reconcile_change_events_own_total", 1.0).await;
    let m = when_the_queue_is_idle(&daemon).await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_change_checks_total{source="event"}"#
        ),
        1.0,
        "one check, for the customer's hold only"
    );
    daemon.stop().await;
}

/// On a real server: the seat events of our repair and rebuild scripts lie
/// between their writing key's `hset` and `del`, and are told ours; a
/// customer's write just before and just after each, and a customer's
/// `DEL`, are not.
#[tokio::test]
async fn our_scripts_seat_writes_are_told_apart_from_the_customers_around_them() {
    let redis = servers::redis_with_keyspace_events();
    let env = estate(Some(&redis), 2, |_| {}).await;
    let store = &env.ctx.redis;
    let channels = Channels::new(store.db(), store.keys.prefix(), Vec::new());
    let mut heard = store
        .subscribe(&channels.patterns(), &[], None)
        .await
        .unwrap();
    store.acquire_leases("me", &[1, 2], 60_000).await.unwrap();
    let customer = |showtime: i64, seat: &str| {
        redis::cmd("HSET")
            .arg(store.keys.seat(showtime))
            .arg(seat)
            .arg("1")
            .clone()
    };
    let _: () = env.redis(&customer(1, "A-1")).await;
    let _: () = env.redis(&customer(1, "A-2")).await;
    let released = release_locks(&env, "me", 1, &["A-1", "A-2"]).await;
    assert_eq!(released.reply.unwrap(), Fenced::Done(vec![true, true]));
    let _: () = env.redis(&customer(1, "A-3")).await;
    let _: () = env.redis(redis::cmd("DEL").arg(store.keys.seat(2))).await;
    let rebuilt = store
        .rebuild_hash("me", "op-1", 2, &[("A-1".into(), SeatState::Free)])
        .await
        .unwrap();
    assert_eq!(rebuilt.reply, Fenced::Done(true));
    let _: () = env.redis(&customer(2, "A-4")).await;

    let mut own = OwnWrites::default();
    let mut told = Vec::new();
    while told.len() < 12 {
        let (channel, event) = tokio::time::timeout(Duration::from_secs(10), heard.next())
            .await
            .expect("a notification")
            .expect("the subscription");
        let message = channels.read(&channel, &event);
        told.push((message, own.ours(message)));
    }
    let writing = |showtime, started| Message::OwnWrites { showtime, started };
    assert_eq!(
        told,
        [
            (Message::Seat(1), false),
            (Message::Seat(1), false),
            (writing(1, true), false),
            (Message::Seat(1), true),
            (Message::Seat(1), true),
            (writing(1, false), false),
            (Message::Seat(1), false),
            (Message::Seat(2), false),
            (writing(2, true), false),
            (Message::Seat(2), true),
            (writing(2, false), false),
            (Message::Seat(2), false),
        ]
    );
}

/// With a grace period, the event's check only records the suspect; the
/// seat is released by the check queued for the grace period's end, not a
/// pass later.
#[tokio::test]
async fn an_orphan_is_released_when_its_grace_ends_without_a_pass() {
    let (_redis, env, daemon) = daemon_with_events(Duration::from_secs(3)).await;

    env.fx.warm(1, &[("A-2", "1")]).await.unwrap();
    seat_becomes(
        &env,
        1,
        "A-2",
        "0",
        "the orphan lock is released after its grace",
    )
    .await;
    // Released by the grace check.
    let m = metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_fixes_total{kind="orphan_locks",source="grace"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_change_fixes_total{kind="orphan_locks",source="event"}"#
        ),
        0.0,
        "the event's check deferred it"
    );
    assert_eq!(env.found_by().await, [found("seat_released", "grace")]);
    daemon.stop().await;
}

/// A daemon runs its first pass seconds after it starts, not at the
/// schedule's first fire (here a year away): its change-driven checks begin
/// with that pass, so a slow `pass.schedule` does not leave them off.
#[tokio::test]
async fn the_first_pass_runs_at_start_and_the_checks_begin_with_it() {
    let redis = servers::redis_with_keyspace_events();
    let env = estate(Some(&redis), 2, |s| {
        s.reconcile.orphan_grace = Duration::ZERO;
    })
    .await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    daemon
        .status_when("the first pass ran, with no fire and no request", |s| {
            s["pass"]["shards"]["0"]["last_fire"] == "ran"
        })
        .await;
    events_on(&daemon).await;
    env.fx.warm(2, &[("A-1", "1")]).await.unwrap();
    seat_becomes(&env, 2, "A-1", "0", "the orphan lock is released").await;
    let m = metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_fixes_total{kind="orphan_locks",source="event"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_change_gaps_total{reason="start"}"#
        ),
        1.0
    );
    daemon.stop().await;
}

/// A suspect whose grace restarts at the confirmation (an order came and went
/// on the seat after it was first seen, a crash between the cancel's commit
/// and its `"0"`: MySQL only, no event) gets a grace check of its own for
/// the new grace's end, not a pass later.
#[tokio::test]
async fn a_grace_that_restarts_at_the_confirmation_is_checked_at_its_new_end() {
    let (_redis, env, daemon) = daemon_with_events(Duration::from_secs(3)).await;

    env.fx.warm(1, &[("A-2", "1")]).await.unwrap();
    let suspects = env.ctx.redis.keys.suspect(1);
    // The check writes the record, then re-reads the seat's rows in MySQL
    // and writes it again with their mark (`"1@<ms>@<mark>"`): wait for the
    // mark, so that the order below comes after that read. An order written
    // before it is in the mark, and the seat was then orphaned throughout
    // since the read: released at the first grace's end, rightly.
    seatflow_test_support::servers::wait_until(
        "the event's check records the suspect with its rows' mark",
        Duration::from_secs(30),
        || async {
            let record: Option<String> = env
                .redis(redis::cmd("HGET").arg(&suspects).arg("A-2"))
                .await;
            record.is_some_and(|r| r.matches('@').count() == 2)
        },
    )
    .await;
    // After the sighting: an order on the seat, cancelled now (its `"0"`
    // lost), so the seat was not orphaned throughout.
    let order = env.fx.order(1, "CANCELLED", &["A-2"], 600).await.unwrap();
    sqlx::query("UPDATE ticket_order SET cancelled_at = UTC_TIMESTAMP(3) WHERE id = ?")
        .bind(order)
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
    seat_becomes(
        &env,
        1,
        "A-2",
        "0",
        "released at the end of the restarted grace",
    )
    .await;
    // A check counts itself once its run is over (after the seat's write
    // and its audit): wait for the queue to be idle, not for the seat.
    let m = when_the_queue_is_idle(&daemon).await;
    assert!(
        sample(
            &m,
            r#"seatflow_reconcile_change_checks_total{source="grace"}"#
        ) >= 2.0,
        "the first grace check restarted it, a second one released it"
    );
    assert_eq!(env.found_by().await, [found("seat_released", "grace")]);
    daemon.stop().await;
}

/// A PENDING order is cancelled, and its seat released, seconds after its
/// deadline (plus the buffer): its showtime was queued for that instant
/// from the deadlines read ahead, with no `expired-orders` run between.
#[tokio::test]
async fn an_unpaid_order_is_cancelled_at_its_deadline_without_a_run() {
    let (env, daemon) = daemon_after_one_pass(None, Duration::ZERO).await;
    let order = env.fx.order(2, "PENDING", &["A-4"], 4).await.unwrap();
    env.fx.warm(2, &[("A-4", "1")]).await.unwrap();
    seatflow_test_support::servers::wait_until(
        "the order is cancelled at its deadline",
        Duration::from_secs(60),
        || async { env.fx.order_status(order).await.unwrap() == "CANCELLED" },
    )
    .await;
    let m = metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_fixes_total{kind="expired_orders",source="deadline"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_runs_total{kind="expired_orders",outcome="success"}"#
        ),
        0.0,
        "no run of the job did it"
    );
    seat_becomes(&env, 2, "A-4", "0", "its seat is released").await;
    let mut by_deadline = env.found_by().await;
    by_deadline.retain(|(kind, _)| kind == "order_cancelled");
    assert_eq!(by_deadline, [found("order_cancelled", "deadline")]);
    daemon.stop().await;
}

/// One `expired-orders` at a time, whatever started it (the one door,
/// `jobs::run`): a deadline's check of a showtime, due while a run of
/// the job is under way (here held up by a lock on the audit table), waits
/// for that run to finish before it starts, and then cancels its order.
#[tokio::test]
async fn a_deadline_check_waits_for_the_running_expired_orders() {
    let env = TestEnv::with(|s| {
        s.reconcile.expired_order_buffer = Duration::ZERO;
        s.mysql.lock_wait_timeout =
            humantime::parse_duration(seatflow_test_support::LONG_LOCK_WAIT).unwrap();
    })
    .await;
    let running_order = seatflow_test_support::seed_expired(&env).await;
    let seats = env.fx.hall(2, 1, 2).await.unwrap();
    env.fx.showtime(2, 2, 60, "ON_SALE").await.unwrap();
    let due_order = env.fx.order(2, "PENDING", &["A-1"], 3).await.unwrap();
    env.fx.warm_all(2, &seats, &[("A-1", "1")]).await.unwrap();
    let request =
        |trigger| RunRequest::new(&env.ctx, trigger, CancellationToken::new(), None, None);
    let enter = |request| {
        let ctx = env.ctx.clone();
        tokio::spawn(async move { jobs::run(&ctx, request).await.report })
    };
    let runs = async || -> Vec<(String, chrono::NaiveDateTime, Option<chrono::NaiveDateTime>)> {
        sqlx::query_as(
            "SELECT kinds, started_at, finished_at FROM reconcile_run ORDER BY started_at",
        )
        .fetch_all(env.ctx.mysql.pool())
        .await
        .unwrap()
    };

    let audit_lock = seatflow_test_support::hold_audit_lock(&env).await;
    let running = enter(request(Trigger::ExpiredOrders));
    wait_until(
        "the job's run has started",
        Duration::from_secs(30),
        || async { runs().await.len() == 1 },
    )
    .await;
    wait_until(
        "the order's deadline has passed",
        Duration::from_secs(30),
        || async {
            let passed: i64 = sqlx::query_scalar(
                "SELECT expires_at < UTC_TIMESTAMP(3) FROM ticket_order WHERE id = ?",
            )
            .bind(due_order)
            .fetch_one(env.ctx.mysql.pool())
            .await
            .unwrap();
            passed == 1
        },
    )
    .await;
    let check = enter(request(Trigger::Check {
        source: Source::Deadline,
        showtimes: vec![2],
    }));
    // Time for the check to start if nothing held it back (its first step
    // is its run's row).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!check.is_finished());
    assert_eq!(runs().await.len(), 1, "the check has not started");
    assert_eq!(env.fx.order_status(due_order).await.unwrap(), "PENDING");

    audit_lock.rollback().await.unwrap();
    let running = running.await.unwrap();
    let check = tokio::time::timeout(Duration::from_secs(60), check)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running.jobs[0].fixed, 1, "{running:?}");
    let cancelled = check
        .jobs
        .iter()
        .find(|j| j.kind == Kind::ExpiredOrders)
        .unwrap();
    assert_eq!(cancelled.fixed, 1, "{check:?}");
    assert_eq!(
        env.fx.order_status(running_order).await.unwrap(),
        "CANCELLED"
    );
    assert_eq!(env.fx.order_status(due_order).await.unwrap(), "CANCELLED");
    let runs = runs().await;
    let [(_, _, Some(job_finished)), (_, check_started, _)] = runs.as_slice() else {
        panic!("{runs:?}");
    };
    assert!(check_started >= job_finished, "{runs:?}");
}

/// A server without keyspace notifications (the default) is found out by
/// the probe and said so; nothing else changes.
#[tokio::test]
async fn a_server_without_keyspace_events_is_reported_off() {
    let redis = servers::redis();
    let (_env, daemon) = daemon_after_one_pass(Some(&redis), Duration::ZERO).await;
    let status = daemon
        .status_when("the probe finds events off", |s| {
            s["changes"]["redis_events"] == "off"
        })
        .await;
    assert_eq!(status["changes"]["queue_depth"], 0);
    events_gauge_says_off(&daemon).await;
    daemon.stop().await;
}

/// A lost subscription is a gap: counted, and a pass is started at once to
/// cover what no one heard; the subscription comes back with the server.
#[tokio::test]
async fn a_lost_subscription_is_a_gap_and_starts_a_pass() {
    let mut redis = servers::redis_with_keyspace_events();
    let (_env, daemon) = daemon_after_one_pass(Some(&redis), Duration::ZERO).await;
    events_on(&daemon).await;
    let passes_before = pass_runs(&metrics(&daemon).await);

    redis.stop();
    redis.start().unwrap();
    seatflow_test_support::servers::wait_until(
        "the gap is counted and a pass runs after it",
        Duration::from_secs(60),
        || async {
            let m = metrics(&daemon).await;
            sample(
                &m,
                r#"seatflow_reconcile_change_gaps_total{reason="connection_lost"}"#,
            ) >= 1.0
                && pass_runs(&m) > passes_before
        },
    )
    .await;
    daemon
        .status_when("subscribed again, events on", |s| {
            s["changes"]["redis_events"] == "on"
        })
        .await;
    daemon.stop().await;
}

/// Two replicas on one shard: the one that runs the passes listens, the
/// other stands by without a subscription (each one would cost Redis a copy
/// of every event).
#[tokio::test]
async fn only_the_replica_running_the_passes_subscribes() {
    let redis = servers::redis_with_keyspace_events();
    let url = format!("redis://127.0.0.1:{}", redis.port());
    let env = TestEnv::with(|s| {
        s.redis.url = seatflow_reconciler::config::SecretUrl::new(url.clone());
        s.set_schedule(seatflow_reconciler::model::Kind::PaidSeats, "* * * * * *");
        s.reconcile.instance = "replica-a".into();
    })
    .await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[]).await.unwrap();
    let mut b_settings = (*env.ctx.settings).clone();
    b_settings.reconcile.instance = "replica-b".into();
    let b_ctx = seatflow_reconciler::run::context::Context::connect(b_settings)
        .await
        .unwrap();
    let a = InProcessDaemon::start(env.ctx.clone()).await;
    let b = InProcessDaemon::start(b_ctx).await;
    let state = async |d: &InProcessDaemon| {
        let body = reqwest::get(d.url("/status"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let s: serde_json::Value = serde_json::from_str(&body).unwrap();
        s["changes"]["redis_events"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // Whichever runs the passes: one listens, the other stands by, and the
    // server has exactly one pattern subscription.
    let psubs = || {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &redis.port().to_string(), "CLIENT", "LIST"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.contains(" psub=0 "))
            .count()
    };
    seatflow_test_support::servers::wait_until(
        "one replica listens, the other stands by",
        Duration::from_secs(60),
        || async {
            let mut states = [state(&a).await, state(&b).await];
            states.sort();
            states == ["on", "standby"] && psubs() == 1
        },
    )
    .await;
    a.stop().await;
    b.stop().await;
}

/// A seat hash deleted or expired (an eviction is the same notification's
/// other name) is rebuilt on its event, with no pass: the other members of
/// the class the `hset` test samples.
#[tokio::test]
async fn a_hash_deleted_or_expired_is_rebuilt_on_its_event() {
    let (_redis, env, daemon) = daemon_with_events(Duration::ZERO).await;
    let keys = &env.ctx.redis.keys;
    let _: () = env.redis(redis::cmd("DEL").arg(keys.seat(1))).await;
    let _: () = env
        .redis(redis::cmd("PEXPIRE").arg(keys.seat(2)).arg(50))
        .await;
    metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_fixes_total{kind="missing_hashes",source="event"}"#,
        2.0,
    )
    .await;
    for showtime in [1, 2] {
        assert_eq!(env.fx.hash(showtime).await.unwrap().len(), 4, "{showtime}");
    }
    daemon.stop().await;
}

/// Rewrites every seat of showtimes `1..=showtimes` with its own value
/// ("0": no drift), pipelined, as fast as the server takes it, for `spell`;
/// samples `/metrics` meanwhile. Returns the commands sent and the largest
/// queue depth seen.
async fn storm(
    env: &TestEnv,
    redis: &PrivateServer,
    daemon: &InProcessDaemon,
    showtimes: i64,
    spell: Duration,
) -> (u64, f64) {
    let keys = env.ctx.redis.keys.clone();
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{}", redis.port()))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let writer = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut sent = 0u64;
        while started.elapsed() < spell {
            let mut pipe = redis::pipe();
            for showtime in 1..=showtimes {
                for seat in ["A-1", "A-2", "A-3", "A-4"] {
                    pipe.hset(keys.seat(showtime), seat, "0").ignore();
                }
            }
            let () = pipe.query_async(&mut conn).await.unwrap();
            sent += showtimes as u64 * 4;
        }
        sent
    });
    let mut deepest: f64 = 0.0;
    while !writer.is_finished() {
        let m = metrics(daemon).await;
        deepest = deepest.max(sample(&m, "seatflow_reconcile_change_queue_depth"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (writer.await.unwrap(), deepest)
}

/// A storm of changes (every seat of its showtimes rewritten as fast as
/// Redis takes it) costs each showtime at most one check per
/// `changes.min_interval`, however many events: a showtime waits in the
/// queue once, and is not handed out again before its interval. The budget
/// is lifted here, so that only the interval holds the checks back.
#[tokio::test]
async fn a_storm_checks_each_showtime_at_most_once_per_min_interval() {
    const SHOWTIMES: i64 = 20;
    let min_interval = Duration::from_secs(2);
    let redis = servers::redis_with_keyspace_events();
    let (env, daemon) = daemon_on_estate(Some(&redis), SHOWTIMES, |s| {
        s.changes.min_interval = min_interval;
        s.changes.event_settle = Duration::ZERO;
        s.changes.max_checks_per_second = 1_000_000;
    })
    .await;
    events_on(&daemon).await;
    let checks = |m: &str| {
        sample(
            m,
            r#"seatflow_reconcile_change_checks_total{source="event"}"#,
        )
    };
    let before = metrics(&daemon).await;
    let started = std::time::Instant::now();

    let (sent, deepest) = storm(&env, &redis, &daemon, SHOWTIMES, Duration::from_secs(6)).await;

    let after = metrics(&daemon).await;
    let spell = started.elapsed().as_secs_f64();
    let events = sample(&after, "seatflow_reconcile_change_events_total")
        - sample(&before, "seatflow_reconcile_change_events_total");
    let checked = checks(&after) - checks(&before);
    // Each showtime: one check at most per interval within the spell, one
    // at its start, and one finishing across its end.
    let most = SHOWTIMES as f64 * (spell / min_interval.as_secs_f64() + 2.0).floor();
    assert!(
        events > 10.0 * most,
        "a storm: {events} events ({sent} writes) against at most {most} checks"
    );
    assert!(checked >= 1.0, "the storm was checked at all");
    assert!(
        checked <= most,
        "{checked} checks of {SHOWTIMES} showtimes in {spell:.1} s (interval {min_interval:?})"
    );
    assert!(deepest <= SHOWTIMES as f64, "queue depth {deepest}");
    daemon.stop().await;
}

/// A storm over more showtimes than the queue holds: the queue stays at its
/// bound (`changes.queue_capacity`), what it drops is counted as a gap, and
/// the gap starts a pass, which covers what was dropped.
#[tokio::test]
async fn a_storm_over_more_showtimes_than_the_queue_holds_is_a_gap_and_a_pass() {
    const SHOWTIMES: i64 = 200;
    const CAPACITY: usize = 50;
    let redis = servers::redis_with_keyspace_events();
    let (env, daemon) = daemon_on_estate(Some(&redis), SHOWTIMES, |s| {
        s.changes.queue_capacity = CAPACITY;
    })
    .await;
    events_on(&daemon).await;
    let passes_before = pass_runs(&metrics(&daemon).await);

    let (_, deepest) = storm(&env, &redis, &daemon, SHOWTIMES, Duration::from_secs(3)).await;

    assert!(
        deepest <= CAPACITY as f64,
        "queue depth {deepest} over its capacity {CAPACITY}"
    );
    seatflow_test_support::servers::wait_until(
        "the dropped changes are a gap, and a pass runs after it",
        Duration::from_secs(60),
        || async {
            let m = metrics(&daemon).await;
            sample(
                &m,
                r#"seatflow_reconcile_change_gaps_total{reason="queue_full"}"#,
            ) >= 1.0
                && pass_runs(&m) > passes_before
        },
    )
    .await;
    daemon.stop().await;
}

/// A payment committed in MySQL whose `"2"` never reached Redis (the crash
/// after the pay step), and a cancel committed whose `"0"` never did: no
/// keyspace event, no pass. The binlog's commits get both showtimes
/// checked: the paid seat sold at once, the released one after its grace.
#[tokio::test]
async fn commits_that_redis_never_heard_of_are_repaired_via_the_binlog_without_a_pass() {
    let server = servers::mariadb_with_binlog();
    let grace = Duration::from_secs(2);
    let (env, daemon, [paid, cancelled]) = daemon_on_binlog(&server, grace).await;

    assert!(env.fx.pay(paid).await.unwrap());
    seat_becomes(&env, 1, "A-1", "2", "the paid seat is sold").await;
    metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_fixes_total{kind="paid_seats",source="binlog"}"#,
        1.0,
    )
    .await;
    assert_eq!(env.found_by().await, [found("seat_set", "binlog")]);

    assert!(env.fx.cancel(cancelled).await.unwrap());
    seat_becomes(&env, 2, "A-2", "0", "the cancelled seat is released").await;
    let m = metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_fixes_total{kind="orphan_locks",source="grace"}"#,
        1.0,
    )
    .await;
    assert!(
        sample(
            &m,
            r#"seatflow_reconcile_change_checks_total{source="binlog"}"#
        ) >= 2.0,
        "each commit asked for a check"
    );
    let mut found_by = env.found_by().await;
    found_by.sort();
    assert_eq!(
        found_by,
        [found("seat_released", "grace"), found("seat_set", "binlog")]
    );
    assert_eq!(pass_runs(&m), 1.0, "no pass after the first");
    daemon.stop().await;
}

/// A schedule imported (showtimes inserted `SCHEDULED`) and a showtime
/// closed ask for no check: the contract repairs nothing of a showtime not
/// for sale, and a check each would hold every other change up behind the
/// check budget. Opening one for sale asks for one, which warms its hash.
#[tokio::test]
async fn showtimes_not_for_sale_after_a_commit_ask_for_no_check() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, _) = daemon_on_binlog(&server, Duration::from_secs(2)).await;
    let pool = env.ctx.mysql.pool();
    for id in 3..=22 {
        env.fx.showtime(id, 1, 60, "SCHEDULED").await.unwrap();
    }
    for (status, id) in [("CLOSED", 2), ("CANCELLED", 3), ("ON_SALE", 22)] {
        sqlx::query("UPDATE showtime SET status = ? WHERE id = ?")
            .bind(status)
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
    }
    seat_becomes(&env, 22, "A-4", "0", "the opened showtime's hash is warmed").await;
    let m = when_the_queue_is_idle(&daemon).await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_change_checks_total{source="binlog"}"#
        ),
        1.0,
        "the opening's check only"
    );
    daemon.stop().await;
}

/// The contract's other MySQL-only windows: a refund committed whose `"0"`
/// never reached Redis (a sold orphan, released after its grace), and a
/// showtime opened for sale whose hash was never warmed (rebuilt). No
/// keyspace event, no pass: the binlog's commits get them checked.
#[tokio::test]
async fn a_refund_and_an_opening_that_redis_never_heard_of_are_repaired_via_the_binlog() {
    let server = servers::mariadb_with_binlog();
    let grace = Duration::from_secs(2);
    let (env, daemon, _) = daemon_on_binlog(&server, grace).await;
    let pool = env.ctx.mysql.pool();

    // Sold, then refunded in MySQL only.
    let sold = env.fx.order(1, "PAID", &["A-3"], 600).await.unwrap();
    env.fx.warm(1, &[("A-3", "2")]).await.unwrap();
    assert!(env.fx.refund(sold).await.unwrap());
    // Scheduled, then opened for sale in MySQL only: no hash.
    env.fx.showtime(3, 1, 60, "SCHEDULED").await.unwrap();
    sqlx::query("UPDATE showtime SET status = 'ON_SALE' WHERE id = 3")
        .execute(pool)
        .await
        .unwrap();

    seat_becomes(&env, 3, "A-4", "0", "the opened showtime's hash is warmed").await;
    seat_becomes(&env, 1, "A-3", "0", "the refunded seat is released").await;
    let m = metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_fixes_total{kind="sold_orphans",source="grace"}"#,
        1.0,
    )
    .await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_change_fixes_total{kind="missing_hashes",source="binlog"}"#
        ),
        1.0
    );
    assert_eq!(pass_runs(&m), 1.0, "no pass after the first");
    daemon.stop().await;
}

/// A killed replication connection is a gap: counted, and a pass covers it;
/// the binlog is read again.
#[tokio::test]
async fn a_killed_binlog_connection_is_a_gap_and_starts_a_pass() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, _) = daemon_on_binlog(&server, Duration::ZERO).await;
    let m = metrics(&daemon).await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_change_gaps_total{reason="binlog_lost"}"#
        ),
        0.0
    );
    let runs = pass_runs(&m);

    for id in binlog_dumps(&env).await {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {id}")))
            .execute(env.ctx.mysql.pool())
            .await
            .unwrap();
    }
    metric_reaches(
        &daemon,
        r#"seatflow_reconcile_change_gaps_total{reason="binlog_lost"}"#,
        1.0,
    )
    .await;
    seatflow_test_support::servers::wait_until(
        "a pass after the gap",
        Duration::from_secs(60),
        || async { pass_runs(&metrics(&daemon).await) > runs },
    )
    .await;
    binlog_dumps_become(&env, 1).await;
    daemon.stop().await;
}

/// The first sighting of `seat`'s suspect record in `showtime`, if any
/// (Redis server time, ms).
async fn suspect_seen_ms(env: &TestEnv, showtime: i64, seat: &str) -> Option<i64> {
    Some(env.suspect(showtime, seat).await?.first_seen_ms)
}

/// A seat seen orphaned (a hold with no order yet), then ordered and the
/// order cancelled, in MySQL only (the cancel's `"0"` lost). The check
/// asked by the cancel's commit sees the seat orphaned again, with order
/// activity since its first sighting: its grace restarts at that check,
/// so the seat is released a grace after the cancel, not at the old
/// grace's end plus a whole new one. (Any check that finds a deferred
/// seat does this MySQL confirmation; the binlog's is the one that comes.)
#[tokio::test]
async fn a_check_that_finds_order_activity_on_a_deferred_seat_restarts_its_grace_at_once() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, [paid, _]) = daemon_on_binlog(&server, Duration::from_secs(120)).await;

    // A hold with no order yet, seen by the check of a commit on its showtime.
    env.fx.warm(1, &[("A-3", "1")]).await.unwrap();
    assert!(env.fx.pay(paid).await.unwrap());
    seatflow_test_support::servers::wait_until(
        "the payment's check records the hold as a suspect",
        Duration::from_secs(30),
        || async { suspect_seen_ms(&env, 1, "A-3").await.is_some() },
    )
    .await;
    let first = suspect_seen_ms(&env, 1, "A-3").await.unwrap();

    // The order comes and goes within one settle: its check sees it gone.
    let cancelled_at = env.ctx.redis.server_time_ms().await.unwrap();
    let order = env.fx.order(1, "PENDING", &["A-3"], 600).await.unwrap();
    assert!(env.fx.cancel(order).await.unwrap());
    seatflow_test_support::servers::wait_until(
        format!(
            "the grace restarts after the cancel (first seen {first}, cancelled {cancelled_at})"
        ),
        Duration::from_secs(30),
        || async {
            suspect_seen_ms(&env, 1, "A-3")
                .await
                .is_some_and(|ms| ms >= cancelled_at)
        },
    )
    .await;
    assert_eq!(
        env.fx.seat_value(1, "A-3").await.unwrap().as_deref(),
        Some("1"),
        "not released before its new grace ends"
    );
    daemon.stop().await;
}

/// Passes run by the daemon so far, after `wait`.
async fn passes_after(daemon: &InProcessDaemon, wait: Duration) -> f64 {
    tokio::time::sleep(wait).await;
    pass_runs(&metrics(daemon).await)
}

/// `pass.schedule = "auto"` with both change sources configured fires
/// every 20 minutes. While a source is down (here the server sends no
/// keyspace events) a pass runs every `pass.while_uncovered` (a minute;
/// 2 s here) anyway; with both sources on, none but the schedule's. The
/// signals follow the cadence in force: the pass interval gauge (which the
/// pass-stalled alert counts in) and `/status` (`pass.fallback`: every,
/// next fire, why; the seat jobs' next fire) say the minute while a source
/// is down, the schedule's with both on.
#[tokio::test]
async fn with_both_sources_configured_a_source_down_brings_the_frequent_sweep_back() {
    let mariadb = servers::mariadb_with_binlog();
    let base = servers::root_url(&mariadb);
    let every = Duration::from_secs(2);
    for events in [false, true] {
        let redis = events.then(servers::redis_with_keyspace_events);
        let env = estate_on(&base, redis.as_ref(), 1, |s| {
            s.changes.mysql_binlog = true;
            s.pass.while_uncovered = Some(every);
        })
        .await;
        let daemon = InProcessDaemon::start(env.ctx.clone()).await;
        binlog_dumps_become(&env, 1).await;
        if events {
            events_on(&daemon).await;
        } else {
            events_gauge_says_off(&daemon).await;
        }
        // The start's passes (and a gap's) are behind: count from here.
        // (The holder listens from its claim, before its first pass.)
        seatflow_test_support::servers::wait_until(
            "the daemon's first pass",
            Duration::from_secs(60),
            || async { pass_runs(&metrics(&daemon).await) >= 1.0 },
        )
        .await;
        let before = passes_after(&daemon, every * 2).await;
        let after = passes_after(&daemon, every * 4).await;
        let interval = sample(
            &metrics(&daemon).await,
            "seatflow_reconcile_pass_interval_seconds",
        );
        let status = daemon.status_when("the status", |_| true).await;
        let fallback = &status["pass"]["fallback"];
        if events {
            assert_eq!(after, before, "both sources on: no pass but the schedule's");
            assert!(interval > 86_400.0, "the schedule's (yearly): {interval}");
            assert!(fallback.is_null(), "{status}");
        } else {
            assert!(
                after >= before + 2.0,
                "events off: a pass every {every:?} ({before} -> {after})"
            );
            assert_eq!(interval, every.as_secs_f64());
            assert_eq!(fallback["every_seconds"], every.as_secs(), "{status}");
            assert!(
                fallback["why"]
                    .as_str()
                    .is_some_and(|w| w.contains("keyspace events off")),
                "{status}"
            );
            let next: chrono::DateTime<chrono::Utc> =
                serde_json::from_value(status["jobs"]["paid_seats"]["next_fire"].clone()).unwrap();
            assert!(
                next <= chrono::Utc::now() + chrono::Duration::seconds(3),
                "the seat jobs' next fire is the fallback's: {status}"
            );
        }
        daemon.stop().await;
    }
}

/// The other member of the class: the hold's own check comes after the
/// order came and went (a customer who cancels within the event's settle,
/// and the cancel's `"0"` is lost). The seat is recorded as a suspect then,
/// seconds after the cancel. The check marks the record with the seat's
/// rows as it reads them, so the grace counts from that sighting: by the
/// order times alone (the cancel within the clocks' slack before it) the
/// confirmation at the grace's end would start a second grace, or the grace
/// would have to start past the slack.
#[tokio::test]
async fn a_suspect_first_seen_just_after_an_order_ended_counts_its_grace_from_that_sighting() {
    let (_redis, env, daemon) = daemon_with_events(Duration::from_secs(20)).await;

    env.fx.warm(1, &[("A-3", "1")]).await.unwrap();
    let order = env.fx.order(1, "PENDING", &["A-3"], 600).await.unwrap();
    assert!(env.fx.cancel(order).await.unwrap());
    let cancelled_at: chrono::NaiveDateTime =
        sqlx::query_scalar("SELECT cancelled_at FROM ticket_order WHERE id = ?")
            .bind(order)
            .fetch_one(env.ctx.mysql.pool())
            .await
            .unwrap();
    let within_slack =
        cancelled_at.and_utc().timestamp_millis() + seatflow_reconciler::plan::CLOCK_SLACK_MS;
    seatflow_test_support::servers::wait_until(
        "the hold's check records the suspect, marked with the seat's rows",
        Duration::from_secs(15),
        || async {
            env.suspect(1, "A-3")
                .await
                .is_some_and(|s| s.rows.is_some())
        },
    )
    .await;
    let record = env.suspect(1, "A-3").await.unwrap();
    assert!(
        record.first_seen_ms < within_slack,
        "the grace counts from the sighting, within the slack after the cancel \
         ({record:?}, cancelled {cancelled_at})"
    );
    // Not released before its grace ends, counted from that sighting (by
    // Redis' clock, the suspect record's)...
    let grace_ends_ms = record.first_seen_ms + 20_000;
    let now_ms = env.ctx.redis.server_time_ms().await.unwrap();
    tokio::time::sleep(Duration::from_millis(
        (grace_ends_ms - 1_500 - now_ms).max(0) as u64,
    ))
    .await;
    assert_eq!(
        env.fx.seat_value(1, "A-3").await.unwrap().as_deref(),
        Some("1"),
        "held until its grace ends"
    );
    // ...and released once it has: by the grace's check, or by a pass a
    // gap started at that moment on a loaded machine (either is the
    // reconciler's to make; the grace is what this test is about).
    seat_becomes(&env, 1, "A-3", "0", "released a grace after that").await;
    let released_ms = env.ctx.redis.server_time_ms().await.unwrap();
    assert!(
        released_ms < grace_ends_ms + 10_000,
        "released within seconds of that grace's end, not after a second one \
         ({} ms after it)",
        released_ms - grace_ends_ms
    );
    let by = env.found_by_at_least(1).await;
    assert!(
        by == [found("seat_released", "grace")] || by == [found("seat_released", "sweep")],
        "{by:?}"
    );
    daemon.stop().await;
}

/// Runs a pass of the seat job `job` through the admin endpoint (once none
/// is running) and waits until it has ended.
async fn one_more_pass(daemon: &InProcessDaemon, job: &str) {
    let runs = |m: &str| {
        ["success", "partial", "failure"]
            .iter()
            .map(|o| {
                sample(
                    m,
                    &format!(r#"seatflow_reconcile_runs_total{{kind="{job}",outcome="{o}"}}"#),
                )
            })
            .sum::<f64>()
    };
    let before = runs(&metrics(daemon).await);
    seatflow_test_support::servers::wait_until(
        "a pass starts",
        Duration::from_secs(30),
        || async { post(daemon, &format!("/jobs/{job}/run")).await.0 == 202 },
    )
    .await;
    seatflow_test_support::servers::wait_until(
        "the pass ends",
        Duration::from_secs(30),
        || async { runs(&metrics(daemon).await) > before },
    )
    .await;
}

/// The sweep's `missed` counter: what a pass repaired while every source
/// was on, with no gap since the pass before. A payment committed in MySQL
/// only (Redis events cannot see it) was missed; an orphan lock whose
/// keyspace event's check is due within seconds, repaired by a pass that
/// came first, was not.
#[tokio::test]
async fn a_pass_counts_as_missed_only_what_no_check_was_due_for() {
    let redis = servers::redis_with_keyspace_events();
    let env = estate(Some(&redis), 2, |s| {
        s.reconcile.orphan_grace = Duration::ZERO;
        // The lock's check waits long enough for the pass to come first.
        s.changes.event_settle = Duration::from_secs(20);
    })
    .await;
    let order = env.fx.order(1, "PENDING", &["A-1"], 600).await.unwrap();
    env.fx.warm(1, &[("A-1", "1")]).await.unwrap();
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    events_on(&daemon).await;
    // A pass with events on (and the start's before it): the watch begins.
    one_more_pass(&daemon, "paid_seats").await;

    assert!(env.fx.pay(order).await.unwrap());
    let events = sample(
        &metrics(&daemon).await,
        "seatflow_reconcile_change_events_total",
    );
    env.fx.warm(2, &[("A-2", "1")]).await.unwrap();
    // The notification travels on its own connection: the lock's check is
    // due only once the watch has read it (counted once it has asked).
    metric_reaches_at_least(
        &daemon,
        "seatflow_reconcile_change_events_total",
        events + 1.0,
    )
    .await;
    // A seat job started alone is a pass of its own (each counts).
    one_more_pass(&daemon, "orphan_locks").await;
    one_more_pass(&daemon, "paid_seats").await;

    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("2")
    );
    assert_eq!(
        env.fx.seat_value(2, "A-2").await.unwrap().as_deref(),
        Some("0")
    );
    let m = metrics(&daemon).await;
    let missed = |kind: &str| {
        sample(
            &m,
            &format!(r#"seatflow_reconcile_change_missed_total{{kind="{kind}"}}"#),
        )
    };
    assert_eq!(missed("paid_seats"), 1.0, "the MySQL-only payment");
    assert_eq!(missed("orphan_locks"), 0.0, "the lock's check was due");
    daemon.stop().await;
}

/// The commands that write (as `MONITOR` shows them).
const WRITES: [&str; 34] = [
    "SET",
    "SETEX",
    "PSETEX",
    "SETNX",
    "GETSET",
    "GETDEL",
    "DEL",
    "UNLINK",
    "HSET",
    "HSETNX",
    "HMSET",
    "HDEL",
    "HINCRBY",
    "EXPIRE",
    "PEXPIRE",
    "PEXPIREAT",
    "PERSIST",
    "RENAME",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LTRIM",
    "LSET",
    "LREM",
    "INCR",
    "INCRBY",
    "EVAL",
    "EVALSHA",
    "FCALL",
    "MULTI",
    "EXEC",
    "FLUSHDB",
    "COPY",
];

/// Every key of a private Redis with a dump of its value.
async fn whole_redis(env: &TestEnv) -> std::collections::BTreeMap<String, Vec<u8>> {
    let keys: Vec<String> = env.redis(redis::cmd("KEYS").arg("*")).await;
    let mut out = std::collections::BTreeMap::new();
    for k in keys {
        let dump: Vec<u8> = env.redis(redis::cmd("DUMP").arg(&k)).await;
        out.insert(k, dump);
    }
    out
}

/// Rule 5 in the daemon, with both change sources: passes every second,
/// checks from a customer's hold (a keyspace event) and a payment (a binlog
/// commit), drift of every job; and Redis (every key of the server: no
/// probe, no binlog position, lease, suspect or cursor) and MySQL (every
/// table: no run, audit row or cancel) stay byte for byte as they were,
/// but for the customer's own writes. The events' state comes from the
/// server's configuration instead of a probe, and `/status` says so.
#[tokio::test]
async fn a_dry_run_daemon_with_both_sources_leaves_both_stores_as_they_were() {
    let mysql = servers::mariadb_with_binlog();
    let redis = servers::redis_with_keyspace_events();
    let base = servers::root_url(&mysql);
    let env = estate_on(&base, Some(&redis), 4, |s| {
        s.reconcile.dry_run = true;
        s.reconcile.orphan_grace = Duration::from_secs(1);
        s.changes.mysql_binlog = true;
        s.changes.mysql_settle = Duration::from_secs(1);
    })
    .await;
    // Drift of every job: an orphan lock, a sold orphan, a paid seat shown
    // free, an expired order, a lost hash.
    env.fx.warm(1, &[("A-1", "1"), ("A-2", "2")]).await.unwrap();
    env.fx.order(1, "PAID", &["A-3"], 600).await.unwrap();
    env.fx.order(1, "PENDING", &["A-4"], -600).await.unwrap();
    env.fx.warm(1, &[("A-4", "1")]).await.unwrap();
    let _: i64 = env
        .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(3)))
        .await;
    let customer = env.fx.order(2, "PENDING", &["A-1"], 600).await.unwrap();
    env.fx.warm(2, &[("A-1", "1")]).await.unwrap();
    let redis_before = whole_redis(&env).await;
    let mysql_before = env.mysql_snapshot().await;
    // Every command the server runs: a write that leaves no trace (the
    // probe's MULTI/HSET/DEL, a lease taken and released) shows here.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let monitor = {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", redis.port())).unwrap();
        let monitor = client.get_async_monitor().await.unwrap();
        let seen = std::sync::Arc::clone(&seen);
        tokio::spawn(async move {
            let mut lines = monitor.into_on_message::<String>();
            while let Some(line) = lines.next().await {
                seen.lock().unwrap().push(line);
            }
        })
    };

    // A pass (by the admin endpoint: scheduled ones would read every
    // showtime before its check came due, and the check would go).
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    assert_eq!(post(&daemon, "/jobs/paid_seats/run").await.0, 202);
    daemon
        .status_when("the first pass ran, dry", |s| {
            s["pass"]["shards"]["0"]["last_fire"] == "dry_run"
        })
        .await;
    let status = daemon
        .status_when("the events are judged without a probe", |s| {
            s["changes"]["redis_events"] == "on"
        })
        .await;
    let note = status["changes"]["redis_events_note"]
        .as_str()
        .unwrap_or_default();
    assert!(
        note.contains("dry run") && note.contains("notify-keyspace-events"),
        "{status}"
    );
    binlog_dumps_become(&env, 1).await;

    // A customer's hold (a keyspace event) and a payment (a binlog commit),
    // in two showtimes (one showtime's two changes are one check).
    env.fx.warm(4, &[("A-2", "1")]).await.unwrap();
    assert!(env.fx.pay(customer).await.unwrap());
    let customer_hash = env.fx.hash(4).await.unwrap();
    let customer_orders = env.mysql_snapshot().await;
    for source in ["event", "binlog"] {
        let series = format!(r#"seatflow_reconcile_change_checks_total{{source="{source}"}}"#);
        metric_reaches_at_least(&daemon, &series, 1.0).await;
    }
    // Every job run once more, each finding its drift and writing nothing.
    for kind in seatflow_test_support::JOB_LABELS {
        assert_eq!(post(&daemon, &format!("/jobs/{kind}/run")).await.0, 202);
        let runs = format!(r#"seatflow_reconcile_runs_total{{kind="{kind}",outcome="success"}}"#);
        let m =
            metric_reaches_at_least(&daemon, &runs, 1.0 + f64::from(kind == "paid_seats")).await;
        let drift = format!(r#"seatflow_reconcile_drift{{kind="{kind}"}}"#);
        assert!(sample(&m, &drift) >= 1.0, "{kind} finds its drift: {m}");
    }
    daemon.stop().await;
    monitor.abort();
    let commands = seen.lock().unwrap().clone();
    let customer = format!("\"HSET\" \"{}\" \"A-2\" \"1\"", env.ctx.redis.keys.seat(4));
    let writes: Vec<&String> = commands
        .iter()
        .filter(|line| !line.contains(&customer))
        .filter(|line| {
            let command = line.split("] \"").nth(1).and_then(|c| c.split('"').next());
            command.is_some_and(|c| WRITES.contains(&c.to_ascii_uppercase().as_str()))
        })
        .collect();
    assert!(
        writes.is_empty() && commands.len() > 10,
        "a dry run wrote to Redis: {writes:#?} ({} commands seen)",
        commands.len()
    );

    let mut redis_after = whole_redis(&env).await;
    let seat4 = env.ctx.redis.keys.seat(4);
    let hash4: std::collections::HashMap<String, String> =
        env.redis(redis::cmd("HGETALL").arg(&seat4)).await;
    assert_eq!(
        hash4, customer_hash,
        "only the customer wrote showtime 4's seats"
    );
    redis_after.remove(&seat4);
    let mut redis_before = redis_before;
    redis_before.remove(&seat4);
    assert_eq!(
        redis_after.keys().collect::<Vec<_>>(),
        redis_before.keys().collect::<Vec<_>>(),
        "a dry run made or removed a key"
    );
    assert_eq!(redis_after, redis_before, "a dry run wrote to Redis");
    let mysql_after = env.mysql_snapshot().await;
    for ((table, after), ((_, before), (_, customer))) in mysql_after
        .iter()
        .zip(mysql_before.iter().zip(&customer_orders))
    {
        let expected = if table == "ticket_order" {
            customer
        } else {
            before
        };
        assert_eq!(after, expected, "a dry run wrote to {table}");
    }
}

/// The replica that claims its shard's pass checks changes from the claim,
/// not from the pass's end: on a large estate a first pass takes minutes
/// (at 100 k showtimes, several), and a customer's drift need not wait.
#[tokio::test]
async fn checks_start_when_the_first_pass_is_claimed_not_when_it_ends() {
    let redis = servers::redis_with_keyspace_events();
    // 400 showtimes at 20 hashes a second: a first pass of 20 s.
    let env = estate(Some(&redis), 400, |s| {
        s.pass.max_hashes_per_second = 20;
        s.pass.hashes_per_batch = 1;
    })
    .await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    let (code, _) = post(&daemon, "/jobs/paid_seats/run").await;
    assert_eq!(code, 202);
    events_on(&daemon).await;
    // An orphan lock on the showtime the pass reads last: released by its
    // event's check while the pass is still under way.
    env.fx.warm(400, &[("A-1", "1")]).await.unwrap();
    seat_becomes(&env, 400, "A-1", "0", "the orphan released by its check").await;
    let status = daemon.status_when("any status", |_| true).await;
    assert!(
        status["pass"]["shards"]["0"]["last_fire"].is_null(),
        "the first pass had ended: {status}"
    );
    assert_eq!(
        env.found_by_at_least(1).await,
        vec![found("seat_released", "event")]
    );
    daemon.stop().await;
}
