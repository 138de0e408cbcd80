//! The audit judged from the stores, over a phase in which only the
//! reconcilers write.
//!
//! The stores are read at both ends of the phase, when nobody writes at all
//! (a cut): every seat field of every showtime's hash (or its absence), and
//! every order's status and every order seat's `active`. Each difference
//! between the two cuts was made by a reconciler of the phase, so each must
//! be accounted for by that phase's audit rows, and each audit row must be
//! a difference, with nothing else read from the product (no report, no
//! log, no metric):
//!
//! - a seat field: its rows, in the order they were written, chain from the
//!   value at the first cut to the value at the second (each row's `before`
//!   is the previous row's `after`; one row for one change); no rows when
//!   the field is unchanged; each row a move the contract's repair table
//!   lets its job make;
//! - a hash absent at the first cut and present at the second: exactly one
//!   rebuild row, counting the fields it wrote (the fields later rows find
//!   absent are not its); a hash never vanishes;
//! - an order: PENDING → CANCELLED with exactly one cancel row, and its
//!   seats' `active` 1 → NULL; no other order or order seat changes.
//!
//! No row may be missing, even though MariaDB refuses the audit during the
//! phase: the design keeps a batch MariaDB refuses in Redis and writes it
//! with a later run (a cancel's row is in the cancel's own transaction), so
//! a row is lost only when Redis refuses it too. Redis is up here (only
//! connections are killed), so "logged as lost"
//! is not accepted at all.

use std::collections::{BTreeMap, BTreeSet};

use seatflow_reconciler::model::ShowtimeId;
use seatflow_test_support::TestEnv;

/// Each showtime's seat hash, field → value (None: no key).
pub type Hashes = BTreeMap<ShowtimeId, Option<BTreeMap<String, String>>>;

/// The seat hashes of `ids`, one at a time (a cut is taken when nobody
/// writes). The test writes nothing but hashes there: any other type fails.
pub async fn seat_hashes(env: &TestEnv, ids: &[ShowtimeId]) -> Hashes {
    let mut out = BTreeMap::new();
    for id in ids {
        let key = env.ctx.redis.keys.seat(*id);
        let kind: String = env.redis(redis::cmd("TYPE").arg(&key)).await;
        let hash = match kind.as_str() {
            "none" => None,
            "hash" => Some(env.redis(redis::cmd("HGETALL").arg(&key)).await),
            other => panic!("{key} is a {other}"),
        };
        out.insert(*id, hash);
    }
    out
}

/// Both stores, read while nobody writes.
pub struct Cut {
    pub hashes: Hashes,
    /// order → (showtime, status).
    pub orders: BTreeMap<i64, (ShowtimeId, String)>,
    /// (order, seat) → active.
    pub order_seats: BTreeMap<(i64, String), Option<i64>>,
}

impl Cut {
    pub async fn take(env: &TestEnv, ids: &[ShowtimeId]) -> Cut {
        let pool = env.ctx.mysql.pool();
        let orders = sqlx::query_as::<_, (i64, ShowtimeId, String)>(
            "SELECT id, showtime_id, status FROM ticket_order",
        )
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, showtime, status)| (id, (showtime, status)))
        .collect();
        let order_seats = sqlx::query_as::<_, (i64, String, Option<i64>)>(
            "SELECT order_id, seat_no, active FROM order_seat",
        )
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(order, seat, active)| ((order, seat), active))
        .collect();
        Cut {
            hashes: seat_hashes(env, ids).await,
            orders,
            order_seats,
        }
    }
}

/// One `reconcile_fix` row.
#[derive(Debug, Clone)]
pub struct Fix {
    pub job: String,
    pub kind: String,
    pub showtime: Option<ShowtimeId>,
    pub seat: Option<String>,
    pub order: Option<i64>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub instance: String,
}

/// Every audit row, in the order the repairs were made (`fixed_at` is
/// stamped once the write is applied, and two writes of one seat are
/// apart by a showtime lease handed over; `id` breaks exact ties).
pub async fn fixes(env: &TestEnv) -> Vec<Fix> {
    type Row = (
        String,
        String,
        Option<i64>,
        Option<String>,
        Option<i64>,
        Option<String>,
        Option<String>,
        String,
    );
    sqlx::query_as::<_, Row>(
        "SELECT job, kind, showtime_id, seat_no, order_id, before_value, after_value, instance \
         FROM reconcile_fix ORDER BY fixed_at, id",
    )
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap()
    .into_iter()
    .map(
        |(job, kind, showtime, seat, order, before, after, instance)| Fix {
            job,
            kind,
            showtime,
            seat,
            order,
            before,
            after,
            instance,
        },
    )
    .collect()
}

/// The seat moves the contract's repair table lets each job make ("absent":
/// no field). paid-seats raises a seat to its occupancy (and fills an
/// absent field, "0" when free); the others lower.
fn contract_allows(job: &str, before: &str, after: &str) -> bool {
    matches!(
        (job, before, after),
        ("orphan_locks", "1", "0")
            | ("expired_orders", "1", "0")
            | ("sold_orphans", "2", "0" | "1")
            | ("paid_seats", "absent" | "0", "1")
            | ("paid_seats", "absent" | "0" | "1", "2")
            | ("paid_seats", "absent", "0")
    )
}

/// Every way the two cuts and the phase's audit rows (in the order they
/// were made) disagree; empty when the audit accounts exactly for every
/// change of the stores and for nothing else.
pub fn judge(first: &Cut, second: &Cut, fixes: &[&Fix]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seat_rows: BTreeMap<(ShowtimeId, String), Vec<&Fix>> = BTreeMap::new();
    let mut rebuilds: BTreeMap<ShowtimeId, Vec<&Fix>> = BTreeMap::new();
    let mut cancels: BTreeMap<i64, Vec<&Fix>> = BTreeMap::new();
    for f in fixes {
        let (before, after) = (
            f.before.as_deref().unwrap_or("-"),
            f.after.as_deref().unwrap_or("-"),
        );
        match (f.kind.as_str(), f.showtime, &f.seat, f.order) {
            ("hash_rebuilt", Some(s), None, None) if f.job == "missing_hashes" => {
                rebuilds.entry(s).or_default().push(f);
            }
            ("order_cancelled", Some(_), None, Some(o)) if f.job == "expired_orders" => {
                cancels.entry(o).or_default().push(f);
            }
            ("seat_set" | "seat_released", Some(s), Some(seat), _) => {
                if !contract_allows(&f.job, before, after) {
                    problems.push(format!("a move no repair makes: {f:?}"));
                }
                seat_rows.entry((s, seat.clone())).or_default().push(f);
            }
            _ => problems.push(format!("an audit row of no known shape: {f:?}")),
        }
    }

    let showtimes: BTreeSet<ShowtimeId> = first
        .hashes
        .keys()
        .chain(second.hashes.keys())
        .copied()
        .collect();
    for id in showtimes {
        let was = first.hashes.get(&id).cloned().flatten();
        let now = second.hashes.get(&id).cloned().flatten();
        let rebuilt = rebuilds.remove(&id).unwrap_or_default();
        let empty = BTreeMap::new();
        let (was_fields, now_fields) = (
            was.as_ref().unwrap_or(&empty),
            now.as_ref().unwrap_or(&empty),
        );
        match (&was, &now) {
            (Some(_), None) => problems.push(format!("showtime {id}: its hash vanished")),
            (None, Some(_)) if rebuilt.len() != 1 => problems.push(format!(
                "showtime {id}: its hash appeared, with {} rebuild rows: {rebuilt:?}",
                rebuilt.len()
            )),
            (Some(_), Some(_)) | (None, None) if !rebuilt.is_empty() => problems.push(format!(
                "showtime {id}: rebuild rows for a hash Redis shows {}: {rebuilt:?}",
                if was.is_some() {
                    "present throughout"
                } else {
                    "absent throughout"
                }
            )),
            _ => {}
        }
        // Right after a rebuild a field holds what the rebuild wrote, which
        // its row does not name: the field's own rows start from anything.
        let after_rebuild = was.is_none() && now.is_some();
        let fields: BTreeSet<String> = was_fields
            .keys()
            .chain(now_fields.keys())
            .cloned()
            .chain(
                seat_rows
                    .range((id, String::new())..)
                    .take_while(|((s, _), _)| *s == id)
                    .map(|((_, seat), _)| seat.clone()),
            )
            .collect();
        let mut filled_later = 0;
        for field in fields {
            let rows = seat_rows.remove(&(id, field.clone())).unwrap_or_default();
            let value = |h: &BTreeMap<String, String>| {
                h.get(&field).cloned().unwrap_or_else(|| "absent".into())
            };
            let (start, end) = (value(was_fields), value(now_fields));
            let mut at: Option<String> = (!after_rebuild).then(|| start.clone());
            let mut left: Vec<&Fix> = rows.clone();
            let mut first_before = None;
            while !left.is_empty() {
                let next = left
                    .iter()
                    .position(|r| at.as_deref().is_none_or(|v| r.before.as_deref() == Some(v)));
                let Some(next) = next else {
                    problems.push(format!(
                        "showtime {id} seat {field}: audit rows {left:?} do not follow from {at:?} (Redis: {start} at the first cut, {end} at the second)"
                    ));
                    break;
                };
                let r = left.remove(next);
                first_before.get_or_insert(r.before.clone());
                at = r.after.clone();
            }
            if first_before == Some(Some("absent".into())) {
                filled_later += 1;
            }
            match at {
                Some(v) if v != end => problems.push(format!(
                    "showtime {id} seat {field}: Redis went {start} -> {end}, the audit rows {rows:?} end at {v}"
                )),
                _ if !rows.is_empty() && !after_rebuild && start == end => problems.push(format!(
                    "showtime {id} seat {field}: audit rows {rows:?} for a field Redis shows unchanged ({start})"
                )),
                _ => {}
            }
        }
        if after_rebuild && let [row] = rebuilt.as_slice() {
            let wrote = format!("{} seats", now_fields.len() - filled_later);
            if row.before.as_deref() != Some("absent") || row.after.as_deref() != Some(&wrote) {
                problems.push(format!(
                    "showtime {id}: the rebuild wrote {wrote} (absent before), its row says {row:?}"
                ));
            }
        }
    }
    for (id, rows) in rebuilds {
        problems.push(format!(
            "rebuild rows of an unknown showtime {id}: {rows:?}"
        ));
    }
    for ((id, seat), rows) in seat_rows {
        problems.push(format!(
            "rows of showtime {id} seat {seat}, not read: {rows:?}"
        ));
    }

    for (id, (showtime, now)) in &second.orders {
        let Some((_, was)) = first.orders.get(id) else {
            problems.push(format!("order {id} appeared"));
            continue;
        };
        let rows = cancels.remove(id).unwrap_or_default();
        if was == now {
            if !rows.is_empty() {
                problems.push(format!(
                    "order {id} stayed {now}, yet audited as cancelled: {rows:?}"
                ));
            }
            continue;
        }
        let ok = was == "PENDING"
            && now == "CANCELLED"
            && matches!(rows.as_slice(), [r] if r.showtime == Some(*showtime)
                && r.before.as_deref() == Some("PENDING")
                && r.after.as_deref() == Some("CANCELLED"));
        if !ok {
            problems.push(format!("order {id}: {was} -> {now}, audit rows {rows:?}"));
        }
    }
    for id in first
        .orders
        .keys()
        .filter(|o| !second.orders.contains_key(o))
    {
        problems.push(format!("order {id} vanished"));
    }
    for (id, rows) in cancels {
        problems.push(format!(
            "cancel rows of an order MySQL does not have: {id} {rows:?}"
        ));
    }
    for (key, now) in &second.order_seats {
        let was = first.order_seats.get(key);
        if was == Some(now) {
            continue;
        }
        let order = &key.0;
        let cancelled = first.orders.get(order).map(|o| o.1.as_str()) == Some("PENDING")
            && second.orders.get(order).map(|o| o.1.as_str()) == Some("CANCELLED");
        if !(cancelled && was == Some(&Some(1)) && now.is_none()) {
            problems.push(format!("order seat {key:?}: active {was:?} -> {now:?}"));
        }
    }
    for key in first
        .order_seats
        .keys()
        .filter(|k| !second.order_seats.contains_key(k))
    {
        problems.push(format!("order seat {key:?} vanished"));
    }
    problems
}
