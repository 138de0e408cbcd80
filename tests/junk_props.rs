//! Property test over both real stores filled with junk: statuses spelled
//! every way, values that are not 0/1/2, keys of the wrong type, negative
//! ids, missing rows and hashes. Whatever the data, a run of all five jobs
//! (grace 0s):
//! - ends;
//! - never moves a seat that a valid order holds anywhere but to the state
//!   that order implies, and never touches a seat held by an order whose
//!   status is outside the contract;
//! - audits every change it made (seat rows, rebuilt hashes, cancels).
//!
//! The oracle is written here, in SQL and HGETALL, not with the planner.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use proptest::prelude::*;
use seatflow_reconciler::model::Kind;
use seatflow_test_support::TestEnv;

const SEATS: [&str; 4] = ["A-1", "A-2", "A-3", "A-4"];

#[derive(Debug, Clone)]
enum Holder {
    Nobody,
    /// An order of this status, `active = 1` unless cancelled or refunded.
    Order {
        status: &'static str,
        expired: bool,
    },
}

#[derive(Debug, Clone)]
enum RedisKey {
    Missing,
    Hash(Vec<Option<&'static str>>, bool),
    WrongType(&'static str),
}

#[derive(Debug, Clone)]
struct Showtime {
    id: i64,
    status: &'static str,
    holders: Vec<Holder>,
    redis: RedisKey,
}

fn holder() -> impl Strategy<Value = Holder> {
    let status = prop::sample::select(vec![
        "PENDING",
        "PAID",
        "CANCELLED",
        "REFUNDED",
        "paid",
        "Paid",
        "PAID ",
        "pending",
        "SOLD",
    ]);
    prop_oneof![
        2 => Just(Holder::Nobody),
        3 => (status, any::<bool>()).prop_map(|(status, expired)| Holder::Order { status, expired }),
    ]
}

fn value() -> impl Strategy<Value = Option<&'static str>> {
    prop::sample::select(vec![
        Some("0"),
        Some("1"),
        Some("2"),
        Some("7"),
        Some(""),
        Some(" 1"),
        None,
    ])
}

fn redis_key() -> impl Strategy<Value = RedisKey> {
    prop_oneof![
        1 => Just(RedisKey::Missing),
        5 => (prop::collection::vec(value(), SEATS.len()), any::<bool>())
            .prop_map(|(v, junk)| RedisKey::Hash(v, junk)),
        1 => prop::sample::select(vec!["string", "list"]).prop_map(RedisKey::WrongType),
    ]
}

fn showtimes() -> impl Strategy<Value = Vec<Showtime>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["ON_SALE", "ON_SALE", "ON_SALE", "on_sale", "CLOSED"]),
            prop::collection::vec(holder(), SEATS.len()),
            redis_key(),
        ),
        1..5,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            // Negative, zero and positive ids.
            .map(|(i, (status, holders, redis))| Showtime {
                id: i as i64 * 7 - 9,
                status,
                holders,
                redis,
            })
            .collect()
    })
}

async fn seed(env: &TestEnv, estate: &[Showtime]) {
    env.fx.hall(1, 1, SEATS.len()).await.unwrap();
    for (n, s) in estate.iter().enumerate() {
        env.fx
            .showtime(s.id, 1, 30 + n as i64, s.status)
            .await
            .unwrap();
        for (seat, h) in SEATS.iter().zip(&s.holders) {
            let Holder::Order { status, expired } = h else {
                continue;
            };
            let expires = if *expired { -3600 } else { 3600 };
            // Created valid, then respelled: `active` stays 1 unless the
            // contract's own cancel or refund cleared it.
            let base = if *status == "PAID" { "PAID" } else { "PENDING" };
            let id = env.fx.order(s.id, base, &[seat], expires).await.unwrap();
            let active = if matches!(*status, "CANCELLED" | "REFUNDED") {
                None
            } else {
                Some(1)
            };
            sqlx::query("UPDATE ticket_order SET status = ? WHERE id = ?")
                .bind(status)
                .bind(id)
                .execute(env.ctx.mysql.pool())
                .await
                .unwrap();
            sqlx::query("UPDATE order_seat SET active = ? WHERE order_id = ?")
                .bind(active)
                .bind(id)
                .execute(env.ctx.mysql.pool())
                .await
                .unwrap();
        }
        let key = env.ctx.redis.keys.seat(s.id);
        match &s.redis {
            RedisKey::Missing => {}
            RedisKey::Hash(values, junk) => {
                let mut cmd = redis::cmd("HSET");
                cmd.arg(&key).arg("JUNK-FIELD").arg("1");
                for (seat, v) in SEATS.iter().zip(values) {
                    if let Some(v) = v {
                        cmd.arg(*seat).arg(*v);
                    }
                }
                let _: i64 = env.redis(&cmd).await;
                if !junk {
                    let _: i64 = env
                        .redis(redis::cmd("HDEL").arg(&key).arg("JUNK-FIELD"))
                        .await;
                }
            }
            RedisKey::WrongType("string") => {
                let _: () = env.redis(redis::cmd("SET").arg(&key).arg("junk")).await;
            }
            RedisKey::WrongType(_) => {
                let _: i64 = env.redis(redis::cmd("RPUSH").arg(&key).arg("junk")).await;
            }
        }
    }
}

/// Every seat field of every showtime's hash (absent key: no entry).
async fn seat_fields(env: &TestEnv, estate: &[Showtime]) -> BTreeMap<(i64, String), String> {
    let mut out = BTreeMap::new();
    for s in estate {
        let key = env.ctx.redis.keys.seat(s.id);
        let kind: String = env.redis(redis::cmd("TYPE").arg(&key)).await;
        if kind != "hash" {
            continue;
        }
        let h: HashMap<String, String> = env.redis(redis::cmd("HGETALL").arg(&key)).await;
        for (f, v) in h {
            out.insert((s.id, f), v);
        }
    }
    out
}

/// (showtime, seat) → exact status of the order holding it with `active = 1`.
async fn holders(env: &TestEnv) -> HashMap<(i64, String), String> {
    let rows: Vec<(i64, String, Vec<u8>)> = sqlx::query_as(
        "SELECT os.showtime_id, os.seat_no, CAST(o.status AS BINARY) FROM order_seat os \
         JOIN ticket_order o ON o.id = os.order_id WHERE os.active = 1",
    )
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap();
    rows.into_iter()
        .map(|(s, seat, st)| ((s, seat), String::from_utf8(st).unwrap()))
        .collect()
}

async fn count(env: &TestEnv, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap()
}

async fn check(estate: Vec<Showtime>) -> Result<(), TestCaseError> {
    let env = TestEnv::new().await;
    seed(&env, &estate).await;
    let before = seat_fields(&env, &estate).await;
    let held_before = holders(&env).await;
    let cancelled_before = count(
        &env,
        "SELECT COUNT(*) FROM ticket_order WHERE BINARY status = 'CANCELLED'",
    )
    .await;

    let report = tokio::time::timeout(Duration::from_secs(120), env.once(&Kind::ALL))
        .await
        .map_err(|_| TestCaseError::fail("the run did not end"))?;

    let after = seat_fields(&env, &estate).await;
    let held_after = holders(&env).await;
    // Valid holders are judged after the run (an expired PENDING order it
    // cancelled no longer holds its seat); unknown ones before and after.
    for ((showtime, seat), status) in &held_after {
        let k = (*showtime, seat.clone());
        let expected = match status.as_str() {
            "PAID" => "2",
            "PENDING" => "1",
            _ => {
                prop_assert_eq!(
                    before.get(&k),
                    after.get(&k),
                    "seat of a {:?} order touched: {:?}",
                    status,
                    k
                );
                continue;
            }
        };
        if before.get(&k) != after.get(&k) {
            prop_assert_eq!(
                after.get(&k).map(String::as_str),
                Some(expected),
                "{:?} held by {}",
                k,
                status
            );
        }
    }
    for (k, status) in &held_before {
        if !matches!(status.as_str(), "PAID" | "PENDING") {
            prop_assert_eq!(
                before.get(k),
                after.get(k),
                "seat of a {:?} order touched: {:?}",
                status,
                k
            );
        }
    }

    // Every change is audited: one row per changed field of a hash that
    // existed, one per rebuilt hash, one per cancelled order.
    let existed: std::collections::BTreeSet<i64> = before.keys().map(|(s, _)| *s).collect();
    let changed_fields = after
        .iter()
        .filter(|(k, v)| existed.contains(&k.0) && before.get(*k) != Some(*v))
        .count() as i64;
    let rebuilt = after
        .keys()
        .map(|(s, _)| *s)
        .collect::<std::collections::BTreeSet<_>>()
        .difference(&existed)
        .count() as i64;
    let cancelled = count(
        &env,
        "SELECT COUNT(*) FROM ticket_order WHERE BINARY status = 'CANCELLED'",
    )
    .await
        - cancelled_before;
    let seat_rows = count(
        &env,
        "SELECT COUNT(*) FROM reconcile_fix WHERE kind IN ('seat_set', 'seat_released')",
    )
    .await;
    let rebuild_rows = count(
        &env,
        "SELECT COUNT(*) FROM reconcile_fix WHERE kind = 'hash_rebuilt'",
    )
    .await;
    let cancel_rows = count(
        &env,
        "SELECT COUNT(*) FROM reconcile_fix WHERE kind = 'order_cancelled'",
    )
    .await;
    prop_assert_eq!(seat_rows, changed_fields, "{}", report.to_text());
    prop_assert_eq!(rebuild_rows, rebuilt, "{}", report.to_text());
    prop_assert_eq!(cancel_rows, cancelled, "{}", report.to_text());
    let cancels = report
        .jobs
        .iter()
        .find(|j| j.kind == Kind::ExpiredOrders)
        .map(|j| j.fixed);
    prop_assert_eq!(cancels, Some(cancelled as u64), "{}", report.to_text());
    Ok(())
}

proptest! {
    // Each case makes a database and runs all five jobs: few, but varied.
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn junk_in_both_stores_never_harms_a_held_seat_and_every_change_is_audited(estate in showtimes()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check(estate))?;
    }
}
