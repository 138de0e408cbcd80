//! Helpers of the tests of the reconciler's own keys (rule 13): those in
//! `tests/it/repairs/own_keys.rs` and the one that pauses a run in a race window,
//! `tests/failpoints/own_keys.rs` (a failpoint test, so in the failpoint
//! tests' own crate).

use crate::TestEnv;
use seatflow_reconciler::error::Result;
use seatflow_reconciler::model::{Kind, SeatRepair, SeatState};
use seatflow_reconciler::store::redis::{Fenced, Replied, SeatBatch};

/// Releases orphan locks (`"1"` -> `"0"`) on `seats` of `showtime` through
/// the repair script, under the showtime lease `token` (taken by the
/// caller): the script's reply, and our keys it replaced.
pub async fn release_locks(
    env: &TestEnv,
    token: &str,
    showtime: i64,
    seats: &[&str],
) -> Replied<Result<Fenced<Vec<bool>>>> {
    let repairs = seats
        .iter()
        .map(|seat| SeatRepair {
            kind: Kind::OrphanLocks,
            seat: (*seat).into(),
            observed: Some(SeatState::Locked),
            target: SeatState::Free,
        })
        .collect();
    env.ctx
        .redis
        .repair_seats(token, &[SeatBatch::new(showtime, repairs)])
        .await
        .unwrap()
        .remove(0)
}

/// Redis's `TYPE` of `key`.
pub async fn key_type(env: &TestEnv, key: &str) -> String {
    env.redis::<String>(redis::cmd("TYPE").arg(key)).await
}

/// Keys the audit backlog was moved aside to.
pub async fn backlog_aside(env: &TestEnv) -> Vec<String> {
    let pattern = format!("{}:wrong-type:*", env.ctx.redis.keys.audit_backlog());
    let mut keys: Vec<String> = env.redis(redis::cmd("KEYS").arg(pattern)).await;
    keys.sort();
    keys
}

/// One showtime (id 1) of a 1 x 3 hall whose A-1 is an orphan lock.
pub async fn orphan_lock(env: &TestEnv) {
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 10, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();
}
