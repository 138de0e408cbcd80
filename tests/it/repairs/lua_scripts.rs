//! The Lua scripts' own contract, called directly: the source the product
//! compiles in, run with EVAL on the real server. The product's callers
//! never send a malformed call or name a seat twice, so the run-level tests
//! cannot reach these guards; they are what keeps a future caller's mistake
//! (or a retry) from writing what it should not (rule 13: every check
//! before the first write; rules 9 and 10: a retried operation gets its
//! first reply back).

use redis::Value;
use seatflow_test_support::TestEnv;

const REPAIR_SEATS: &str = include_str!("../../../src/store/lua/repair_seats.lua");
const REBUILD_HASH: &str = include_str!("../../../src/store/lua/rebuild_hash.lua");
const RECORD_SUSPECTS: &str = include_str!("../../../src/store/lua/record_suspects.lua");
const LEASE_ACQUIRE: &str = include_str!("../../../src/store/lua/lease_acquire.lua");
const LEASE_RENEW: &str = include_str!("../../../src/store/lua/lease_renew.lua");
const PASS_CLAIM: &str = include_str!("../../../src/store/lua/pass_claim.lua");
const PASS_FINISH: &str = include_str!("../../../src/store/lua/pass_finish.lua");
const BACKLOG_READ: &str = include_str!("../../../src/store/lua/backlog_read.lua");
const BACKLOG_PUSH: &str = include_str!("../../../src/store/lua/backlog_push.lua");
const CURSOR_CAS: &str = include_str!("../../../src/store/lua/cursor_cas.lua");

const TOKEN: &str = "our-token";
const SHOWTIME: i64 = 7;

async fn eval(
    env: &TestEnv,
    script: &str,
    keys: &[String],
    args: &[&str],
) -> redis::RedisResult<Value> {
    let mut c = env.ctx.redis.connection();
    let script = redis::Script::new(script);
    let mut invocation = script.prepare_invoke();
    for k in keys {
        invocation.key(k);
    }
    for a in args {
        invocation.arg(*a);
    }
    invocation.invoke_async(&mut c).await
}

/// The error a refused call replies with.
fn refused(reply: redis::RedisResult<Value>) -> String {
    match reply {
        Err(e) => e.to_string(),
        Ok(v) => panic!("the call was accepted: {v:?}"),
    }
}

fn ints(reply: redis::RedisResult<Value>) -> Vec<i64> {
    redis::from_redis_value(reply.unwrap()).unwrap()
}

/// Keys of showtime `SHOWTIME` the seat scripts take (seat, lease,
/// suspects, done, writing), with our lease held.
async fn leased(env: &TestEnv) -> (String, String, String, String, String) {
    let k = &env.ctx.redis.keys;
    let _: () = env
        .redis(
            redis::cmd("SET")
                .arg(k.showtime_lease(SHOWTIME))
                .arg(TOKEN)
                .arg("PX")
                .arg(60_000),
        )
        .await;
    (
        k.seat(SHOWTIME),
        k.showtime_lease(SHOWTIME),
        k.suspect(SHOWTIME),
        k.done(SHOWTIME),
        k.writing(SHOWTIME),
    )
}

async fn exists(env: &TestEnv, key: &str) -> bool {
    env.redis::<i64>(redis::cmd("EXISTS").arg(key)).await == 1
}

/// A seat named twice in one call: the second triple compares with what
/// the first one wrote, not with what the hash held before the call.
#[tokio::test]
async fn repair_seats_judges_a_seat_named_twice_by_the_first_write() {
    let env = TestEnv::new().await;
    let (seat, lease, suspect, done, writing) = leased(&env).await;
    let _: () = env
        .redis(redis::cmd("HSET").arg(&seat).arg("A-1").arg("1"))
        .await;
    let keys = [seat.clone(), lease, suspect, done, writing];
    let reply = eval(
        &env,
        REPAIR_SEATS,
        &keys,
        &[TOKEN, "op-1", "A-1", "1", "0", "A-1", "1", "2"],
    )
    .await;
    assert_eq!(
        ints(reply),
        [1, 0, 1, 0],
        "the second triple saw the first's \"0\""
    );
    assert_eq!(
        env.fx.seat_value(SHOWTIME, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
}

/// Arguments that are not seat triples, or a target that is not a seat
/// state, are refused before any write.
#[tokio::test]
async fn repair_seats_refuses_malformed_arguments_and_writes_nothing() {
    let env = TestEnv::new().await;
    let (seat, lease, suspect, done, writing) = leased(&env).await;
    let _: () = env
        .redis(redis::cmd("HSET").arg(&seat).arg("A-1").arg("1"))
        .await;
    let keys = [seat.clone(), lease, suspect, done.clone(), writing];
    let err = refused(eval(&env, REPAIR_SEATS, &keys, &[TOKEN, "op-1", "A-1", "1"]).await);
    assert!(err.contains("not seat triples"), "{err}");
    let err = refused(eval(&env, REPAIR_SEATS, &keys, &[TOKEN, "op-2", "A-1", "1", "3"]).await);
    assert!(err.contains("not 0, 1 or 2"), "{err}");
    assert_eq!(
        env.fx.seat_value(SHOWTIME, "A-1").await.unwrap().as_deref(),
        Some("1")
    );
    assert!(!exists(&env, &done).await, "no reply recorded");
}

/// Arguments that are not field/value pairs (none, or one left over) are
/// refused before any write: no half hash.
#[tokio::test]
async fn rebuild_hash_refuses_arguments_that_are_not_pairs() {
    let env = TestEnv::new().await;
    let (seat, lease, _, done, writing) = leased(&env).await;
    let keys = [seat.clone(), lease, done.clone(), writing];
    for args in [
        &[TOKEN, "op-1"][..],
        &[TOKEN, "op-2", "A-1", "0", "A-2"][..],
    ] {
        let err = refused(eval(&env, REBUILD_HASH, &keys, args).await);
        assert!(err.contains("not field/value pairs"), "{args:?}: {err}");
    }
    assert!(!exists(&env, &seat).await);
    assert!(!exists(&env, &done).await);
}

/// A rebuild retried with its operation id (its reply was lost) gets its
/// first reply, "created", not "the hash exists": the retry is audited as
/// the rebuild it was, once. The reply is kept under the showtime's done key.
#[tokio::test]
async fn a_retried_rebuild_gets_its_first_reply() {
    let env = TestEnv::new().await;
    let (seat, lease, _, done, writing) = leased(&env).await;
    let keys = [seat.clone(), lease, done.clone(), writing];
    let args = [TOKEN, "op-1", "A-1", "0", "A-2", "1"];
    assert_eq!(ints(eval(&env, REBUILD_HASH, &keys, &args).await), [1, 0]);
    assert_eq!(
        ints(eval(&env, REBUILD_HASH, &keys, &args).await),
        [1, 0],
        "the retry"
    );
    let kept: Option<String> = env.redis(redis::cmd("HGET").arg(&done).arg("op-1")).await;
    assert_eq!(kept.as_deref(), Some("1"));
    // A new operation on the now existing hash leaves it alone.
    let again = [TOKEN, "op-2", "A-1", "1", "A-2", "1"];
    assert_eq!(ints(eval(&env, REBUILD_HASH, &keys, &again).await), [0, 0]);
    assert_eq!(
        env.fx.seat_value(SHOWTIME, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
}

/// A TTL that is not a positive number of milliseconds is refused (a
/// record key without expiry, or one that expires at once, never is), and
/// so are arguments that are not triples.
#[tokio::test]
async fn record_suspects_refuses_a_ttl_that_is_not_positive() {
    let env = TestEnv::new().await;
    let keys = [env.ctx.redis.keys.suspect(SHOWTIME)];
    let suspect = &keys[0];
    for ttl in ["0", "-5", "soon"] {
        let err = refused(eval(&env, RECORD_SUSPECTS, &keys, &[ttl, "r", "A-1", "1@5"]).await);
        assert!(err.contains("bad arguments"), "{ttl}: {err}");
    }
    // Nor arguments that are not triples.
    let err = refused(eval(&env, RECORD_SUSPECTS, &keys, &["1000", "r", "A-1"]).await);
    assert!(err.contains("bad arguments"), "{err}");
    assert!(!exists(&env, suspect).await);
}

/// A lease is never taken with an empty token or a TTL that is not a
/// positive number of milliseconds (a lease without expiry would be stuck,
/// one that expires at once no lease), nor renewed with such a TTL.
#[tokio::test]
async fn leases_refuse_an_empty_token_or_a_ttl_that_is_not_positive() {
    let env = TestEnv::new().await;
    let lease = [env.ctx.redis.keys.showtime_lease(SHOWTIME)];
    for args in [["", "5000"], [TOKEN, "0"], [TOKEN, "-1"], [TOKEN, "soon"]] {
        let err = refused(eval(&env, LEASE_ACQUIRE, &lease, &args).await);
        assert!(err.contains("bad arguments"), "{args:?}: {err}");
    }
    assert!(!exists(&env, &lease[0]).await, "no lease taken");
    let taken = eval(&env, LEASE_ACQUIRE, &lease, &[TOKEN, "60000"]).await;
    assert_eq!(taken.unwrap(), Value::Int(1), "taken");
    for ttl in ["0", "-1", "soon"] {
        let err = refused(eval(&env, LEASE_RENEW, &lease, &[TOKEN, ttl]).await);
        assert!(err.contains("bad TTL"), "{ttl}: {err}");
    }
    let pttl: i64 = env.redis(redis::cmd("PTTL").arg(&lease[0])).await;
    assert!(pttl > 0, "the lease keeps its expiry: {pttl}");
}

/// A pass is never claimed with a TTL that is not positive or a slot that
/// is not a number.
#[tokio::test]
async fn pass_claim_refuses_a_bad_ttl_or_slot() {
    let env = TestEnv::new().await;
    let k = &env.ctx.redis.keys;
    let shard = seatflow_reconciler::model::Shard::ALL;
    let keys = [k.pass_lease(shard), k.pass_record(shard)];
    for args in [
        ["me i", "0", "0"],
        ["me i", "-5", "0"],
        ["me i", "x", "0"],
        ["me i", "5000", "slot"],
    ] {
        let err = refused(eval(&env, PASS_CLAIM, &keys, &args).await);
        assert!(err.contains("bad arguments"), "{args:?}: {err}");
    }
    assert!(!exists(&env, &keys[0]).await, "no pass claimed");
}

/// The audit backlog is read in counts of at least one row, and a push
/// names at least one row.
#[tokio::test]
async fn the_audit_backlog_refuses_a_bad_count_or_an_empty_push() {
    let env = TestEnv::new().await;
    let k = &env.ctx.redis.keys;
    let keys = [k.audit_backlog(), k.audit_backlog_aside()];
    let _: () = env
        .redis(redis::cmd("RPUSH").arg(&keys[0]).arg("row"))
        .await;
    for count in ["0", "-1", "all"] {
        let err = refused(eval(&env, BACKLOG_READ, &keys, &[count]).await);
        assert!(err.contains("bad count"), "{count}: {err}");
    }
    let err = refused(eval(&env, BACKLOG_PUSH, &keys, &[]).await);
    assert!(err.contains("no rows"), "{err}");
    let rows: Vec<String> = env
        .redis(redis::cmd("LRANGE").arg(&keys[0]).arg(0).arg(-1))
        .await;
    assert_eq!(rows, ["row"]);
}

/// Records and clears, as the sweep sends them: a record sets first-seen
/// and the key's expiry; clearing a seat with no record is no change (and
/// no error); clearing with no state ("", a record that does not decode)
/// removes whatever the record holds. The reply says no key was replaced.
#[tokio::test]
async fn record_suspects_records_and_clears() {
    let env = TestEnv::new().await;
    let keys = [env.ctx.redis.keys.suspect(SHOWTIME)];
    let record = eval(
        &env,
        RECORD_SUSPECTS,
        &keys,
        &["60000", "r", "A-1", "1@5", "c", "A-2", "1"],
    );
    assert_eq!(ints(record.await), [1, 0], "one change, no key replaced");
    let pttl: i64 = env.redis(redis::cmd("PTTL").arg(&keys[0])).await;
    assert!(pttl > 0, "the records expire: {pttl}");
    let _: () = env
        .redis(redis::cmd("HSET").arg(&keys[0]).arg("A-3").arg("junk"))
        .await;
    let clear_any = eval(&env, RECORD_SUSPECTS, &keys, &["60000", "c", "A-3", ""]);
    assert_eq!(ints(clear_any.await), [1, 0]);
    let left: Vec<String> = env.redis(redis::cmd("HKEYS").arg(&keys[0])).await;
    assert_eq!(left, ["A-1"]);
}

/// A sweep cursor moves only from the value its run read: another run's
/// move is left alone.
#[tokio::test]
async fn cursor_cas_moves_only_from_the_value_read() {
    let env = TestEnv::new().await;
    let keys = [env.ctx.redis.keys.cursor("test")];
    let first = eval(&env, CURSOR_CAS, &keys, &["", "a"]).await;
    assert_eq!(first.unwrap(), Value::Int(1));
    for seen in ["", "b"] {
        let stale = eval(&env, CURSOR_CAS, &keys, &[seen, "c"]).await;
        assert_eq!(stale.unwrap(), Value::Int(0), "seen {seen:?}");
    }
    let cursor: Option<String> = env.redis(redis::cmd("GET").arg(&keys[0])).await;
    assert_eq!(cursor.as_deref(), Some("a"));
}

/// A pass outside the schedule (slot 0: `once`, the admin endpoint) is
/// claimed whatever pass the record says completed; a scheduled slot
/// already completed is not run again.
#[tokio::test]
async fn pass_claim_runs_a_pass_outside_the_schedule_after_a_completed_one() {
    let env = TestEnv::new().await;
    let k = &env.ctx.redis.keys;
    let shard = seatflow_reconciler::model::Shard::ALL;
    let keys = [k.pass_lease(shard), k.pass_record(shard)];
    let _: () = env
        .redis(redis::cmd("SET").arg(&keys[1]).arg("5000 6000 other"))
        .await;
    let done = eval(&env, PASS_CLAIM, &keys, &["t1 me", "60000", "5000"])
        .await
        .unwrap();
    let code: Vec<Value> = redis::from_redis_value(done).unwrap();
    assert_eq!(code[0], Value::Int(2), "slot 5000 was done");
    let outside = eval(&env, PASS_CLAIM, &keys, &["t1 me", "60000", "0"])
        .await
        .unwrap();
    let code: Vec<Value> = redis::from_redis_value(outside).unwrap();
    assert_eq!(code[0], Value::Int(1), "claimed: {code:?}");
}

/// A pass whose lease went to another replica records nothing and leaves
/// that replica's lease alone (fenced); its own lease is released with the
/// record, or kept when asked (the daemon's own shard, held between
/// passes).
#[tokio::test]
async fn pass_finish_is_fenced_by_the_lease() {
    let env = TestEnv::new().await;
    let k = &env.ctx.redis.keys;
    let shard = seatflow_reconciler::model::Shard::ALL;
    let keys = [k.pass_lease(shard), k.pass_record(shard)];
    let _: () = env
        .redis(redis::cmd("SET").arg(&keys[0]).arg("t2 other"))
        .await;
    let late = eval(&env, PASS_FINISH, &keys, &["t1 me", "5000 6000 me", "1"]).await;
    assert_eq!(late.unwrap(), Value::Int(0), "not ours any more");
    let record: Option<String> = env.redis(redis::cmd("GET").arg(&keys[1])).await;
    assert_eq!(record, None, "nothing recorded");
    let _: () = env
        .redis(redis::cmd("SET").arg(&keys[0]).arg("t1 me"))
        .await;
    // A record key of the wrong type (ours: replaced).
    let _: () = env.redis(redis::cmd("SADD").arg(&keys[1]).arg("m")).await;
    let ours = eval(&env, PASS_FINISH, &keys, &["t1 me", "5000 6000 me", "1"]).await;
    assert_eq!(ours.unwrap(), Value::Int(1));
    let record: Option<String> = env.redis(redis::cmd("GET").arg(&keys[1])).await;
    assert_eq!(record.as_deref(), Some("5000 6000 me"));
    assert!(!exists(&env, &keys[0]).await, "released");
    // Kept: recorded, the lease stays.
    let _: () = env
        .redis(redis::cmd("SET").arg(&keys[0]).arg("t1 me"))
        .await;
    let kept = eval(&env, PASS_FINISH, &keys, &["t1 me", "7000 8000 me", "0"]).await;
    assert_eq!(kept.unwrap(), Value::Int(1));
    let record: Option<String> = env.redis(redis::cmd("GET").arg(&keys[1])).await;
    assert_eq!(record.as_deref(), Some("7000 8000 me"));
    assert!(exists(&env, &keys[0]).await, "kept");
    // Neither: refused before any write.
    let bad = eval(&env, PASS_FINISH, &keys, &["t1 me", "9000 9100 me", "yes"]).await;
    assert!(bad.is_err(), "{bad:?}");
    let record: Option<String> = env.redis(redis::cmd("GET").arg(&keys[1])).await;
    assert_eq!(record.as_deref(), Some("7000 8000 me"));
}
