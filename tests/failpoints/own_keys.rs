//! Rule 13 (see `tests/it/repairs/own_keys.rs`) where it meets a race window: one
//! of our keys (the audit backlog, the showtime lease) changes type while a
//! run is paused between taking its lease and writing. Here, not with the
//! other own-keys tests, because they arm failpoints (see `main.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use seatflow_reconciler::error::Stage;
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::race_window::{SEAT_BEFORE_CONFIRM, SEAT_BEFORE_REPAIR};
use seatflow_reconciler::run::jobs::report::{Outcome, RunReport};
use seatflow_test_support::TestEnv;
use seatflow_test_support::own_keys::{backlog_aside, key_type, orphan_lock};
use seatflow_test_support::races::Races;

/// A backlog key of the wrong type while MySQL refuses the audit: the rows
/// of repairs already applied used to be lost (RPUSH failed) and every later
/// run warned. Now the key is moved aside, members intact, the rows go to a
/// fresh backlog and the next run writes them.
#[tokio::test]
async fn audit_rows_survive_a_backlog_key_of_the_wrong_type() {
    let env = TestEnv::new().await;
    orphan_lock(&env).await;
    let backlog = env.ctx.redis.keys.audit_backlog();
    env.sql("RENAME TABLE reconcile_fix TO reconcile_fix_away")
        .await;
    // The set appears after the run drained the backlog, before the repair.
    let races = Races::new();
    let first = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_REPAIR,
            &[Kind::OrphanLocks],
            async || {
                let _: () = env
                    .redis(redis::cmd("SADD").arg(&backlog).arg("m1").arg("m2"))
                    .await;
            },
        )
        .await;
    env.sql("RENAME TABLE reconcile_fix_away TO reconcile_fix")
        .await;
    assert_eq!(first.jobs[0].fixed, 1, "{}", first.to_text());
    assert_eq!(key_type(&env, &backlog).await, "list", "a fresh backlog");
    let kept: i64 = env.redis(redis::cmd("LLEN").arg(&backlog)).await;
    assert_eq!(kept, 1, "the repair's row waits in Redis");
    let aside = backlog_aside(&env).await;
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(key_type(&env, &aside[0]).await, "set");
    let mut members: Vec<String> = env.redis(redis::cmd("SMEMBERS").arg(&aside[0])).await;
    members.sort();
    assert_eq!(members, ["m1", "m2"]);

    let second = env.once(&[Kind::OrphanLocks]).await;
    assert_eq!(second.jobs[0].fixed, 0, "{}", second.to_text());
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_fix WHERE run_id = ?")
        .bind(&first.run_id)
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
    assert_eq!(rows, 1, "the next run wrote the repair's audit row");
    assert_eq!(key_type(&env, &backlog).await, "none");
    assert_eq!(backlog_aside(&env).await, aside, "left for an operator");
}

/// A list at `key`, standing for a showtime lease key that some other tool
/// rewrote in another shape while the run held it. Returns its members.
async fn turn_into_a_list(env: &TestEnv, key: &str) -> Vec<String> {
    let members = vec!["someone".to_string(), "else".to_string()];
    let _: () = env.redis(redis::cmd("DEL").arg(key)).await;
    let _: () = env.redis(redis::cmd("RPUSH").arg(key).arg(&members)).await;
    members
}

/// What the test's list at `key` holds now.
async fn list_members(env: &TestEnv, key: &str) -> Vec<String> {
    env.redis(redis::cmd("LRANGE").arg(key).arg(0).arg(-1))
        .await
}

/// The next run meets the list in `lease_acquire.lua`, which replaces it
/// (nobody's lease, rule 13), reports it and repairs the seat it kept from
/// the first run: the wrong-shaped key blocked nothing for longer than the
/// run that met it.
async fn assert_the_next_run_replaces_the_key_and_repairs(env: &TestEnv, lock: &str) {
    let next = env.job(Kind::OrphanLocks).await;
    assert_eq!(
        (next.fixed, next.invalid_data, next.errors),
        (1, 1, 0),
        "{next:?}"
    );
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
    assert_eq!(key_type(env, lock).await, "none", "our lease, released");
}

/// Rule 13 in `repair_seats.lua`: the showtime lease key's type is checked
/// before the script reads it. Between the confirmation and the script the lock
/// key becomes a list: the lease is no longer ours, so the script answers
/// "not our lease" with nothing written (no seat, no done record), where a
/// GET on the list would have failed the script instead. The run counts a
/// lost lease (stage `lock`) and goes on; its release at the end
/// (`lease_release.lua`, also type-checked) leaves the list alone.
#[tokio::test]
async fn a_lock_key_turned_into_a_list_before_the_repair_is_a_lost_lease() {
    let env = TestEnv::new().await;
    orphan_lock(&env).await;
    let keys = &env.ctx.redis.keys;
    let lock = keys.showtime_lease(1);
    let races = Races::new();
    let mut members = Vec::new();
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_REPAIR,
            &[Kind::OrphanLocks],
            async || {
                members = turn_into_a_list(&env, &lock).await;
            },
        )
        .await;

    assert_a_lost_lease_and_the_seat_untouched(&env, &report, "a failed script").await;
    assert_eq!(
        key_type(&env, &keys.done(1)).await,
        "none",
        "no done record"
    );
    assert!(env.audit().await.is_empty());
    assert_eq!(list_members(&env, &lock).await, members, "left alone");

    // Still under `races`: no window of another test catches this run.
    assert_the_next_run_replaces_the_key_and_repairs(&env, &lock).await;
}

/// The run went on with the showtime dropped as a lost lease (one `lock`
/// error, not `not_what`), and its seat is as it was.
async fn assert_a_lost_lease_and_the_seat_untouched(
    env: &TestEnv,
    report: &RunReport,
    not_what: &str,
) {
    let job = &report.jobs[0];
    assert_eq!(
        (job.outcome, job.fixed, job.fatal.as_deref()),
        (Outcome::Partial, 0, None),
        "{job:?}"
    );
    assert_eq!(
        job.errors_by_stage,
        BTreeMap::from([(Stage::Lock, 1)]),
        "a lost lease, not {not_what}: {job:?}"
    );
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("1")
    );
}

/// Rule 13 in `lease_renew.lua`: the key's type is checked before the
/// script reads it. A run stalls before its confirmation long enough for its
/// lease to be due for renewal, and meanwhile the lock key becomes a list.
/// The renewal answers "not ours" (nothing written: the list keeps its
/// members and gets no expiry), so the run drops the showtime as a lost
/// lease (stage `lock`) and writes nothing there, where a GET on the list
/// would have failed the renewal and stopped the whole sweep.
#[tokio::test]
async fn a_lock_key_turned_into_a_list_before_its_renewal_is_a_lost_lease() {
    // The shortest lease the configuration allows, so the wait below for it
    // to be due is short.
    const TTL: Duration = Duration::from_secs(1);
    let env = TestEnv::with(|s| s.reconcile.lock_ttl = TTL).await;
    orphan_lock(&env).await;
    let keys = &env.ctx.redis.keys;
    let lock = keys.showtime_lease(1);
    let races = Races::new();
    let mut members = Vec::new();
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_CONFIRM,
            &[Kind::OrphanLocks],
            async || {
                // The run renews a lease once a third of its TTL has passed
                // since it took it, which was before this window: waiting a
                // third here (the run is paused) makes the renewal due, not
                // a bound anything is judged by.
                tokio::time::sleep(TTL / 3).await;
                members = turn_into_a_list(&env, &lock).await;
            },
        )
        .await;

    assert_a_lost_lease_and_the_seat_untouched(&env, &report, "a failed renewal").await;
    assert!(env.audit().await.is_empty());
    assert_eq!(list_members(&env, &lock).await, members, "left alone");
    let pttl: i64 = env.redis(redis::cmd("PTTL").arg(&lock)).await;
    assert_eq!(pttl, -1, "the renewal set no expiry on the list");

    // Still under `races`: no window of another test catches this run.
    assert_the_next_run_replaces_the_key_and_repairs(&env, &lock).await;
}
