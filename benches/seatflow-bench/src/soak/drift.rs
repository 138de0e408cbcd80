//! Drift injected during the soak, and how long each took to be repaired.
//!
//! Every round (once a minute) sets a share of the estate's seats to a value
//! that disagrees with MySQL, in Redis only, rotating over four kinds, and now
//! and then deletes a whole seat hash. Each injection is recorded with its
//! time; at the end, the reconciler's audit rows (`reconcile_fix`) for the same
//! seat give the time of its repair.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::Result;
use chrono::{DateTime, NaiveDateTime, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use sqlx::mysql::MySqlPool;

use crate::bench::Bench;
use crate::estate::{Estate, Occupant};

/// Attempts to find a showtime with a seat of the wanted kind before giving up on it.
const PICK_ATTEMPTS: usize = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InjectedKind {
    /// PAID in MySQL, `"0"` in Redis (the paid seat shown free).
    PaidShownFree,
    /// PAID in MySQL, `"1"` in Redis (the `"1"` → `"2"` step lost).
    PaidShownLocked,
    /// Free in MySQL, `"1"` in Redis (a hold whose order was never inserted).
    OrphanLock,
    /// Free in MySQL, `"2"` in Redis (a refund whose `"2"` → `"0"` was lost).
    SoldOrphan,
    /// The whole seat hash deleted.
    DeletedHash,
}

impl InjectedKind {
    const SEAT_KINDS: [InjectedKind; 4] = [
        InjectedKind::PaidShownFree,
        InjectedKind::PaidShownLocked,
        InjectedKind::OrphanLock,
        InjectedKind::SoldOrphan,
    ];

    /// Which seats can carry it, and the value it leaves in Redis.
    fn seat(self) -> (Occupant, u8) {
        match self {
            InjectedKind::PaidShownFree => (Occupant::Paid, b'0'),
            InjectedKind::PaidShownLocked => (Occupant::Paid, b'1'),
            InjectedKind::OrphanLock => (Occupant::Free, b'1'),
            InjectedKind::SoldOrphan | InjectedKind::DeletedHash => (Occupant::Free, b'2'),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            InjectedKind::PaidShownFree => "paid seat shown free",
            InjectedKind::PaidShownLocked => "paid seat shown locked",
            InjectedKind::OrphanLock => "orphan lock",
            InjectedKind::SoldOrphan => "sold orphan",
            InjectedKind::DeletedHash => "deleted seat hash",
        }
    }
}

/// One injected disagreement.
#[derive(Debug, Clone, Serialize)]
pub struct Injected {
    pub showtime: i64,
    /// `None` for a deleted hash.
    pub seat: Option<String>,
    pub kind: InjectedKind,
    pub injected_at: DateTime<Utc>,
}

pub struct Injector<'a> {
    bench: &'a Bench,
    estate: &'a Estate,
    rng: SmallRng,
    per_round: usize,
    delete_every: u64,
    rounds: u64,
    /// (showtime, seat index) already used: a seat is drifted once per soak.
    taken: HashSet<(i64, usize)>,
    /// Showtimes with a seat drifted, and those whose hash was deleted: a
    /// deletion takes a showtime nobody else touched, and keeps it.
    touched: HashSet<i64>,
    deleted: HashSet<i64>,
    pub log: Vec<Injected>,
}

impl<'a> Injector<'a> {
    /// `per_round` seats per round; a hash deleted every `delete_every`
    /// rounds (from the second round on; 0: never).
    pub fn new(bench: &'a Bench, estate: &'a Estate, per_round: usize, delete_every: u64) -> Self {
        Injector {
            bench,
            estate,
            rng: SmallRng::seed_from_u64(estate.seed ^ 0xD21F7),
            per_round,
            delete_every,
            rounds: 0,
            taken: HashSet::new(),
            touched: HashSet::new(),
            deleted: HashSet::new(),
            log: Vec::new(),
        }
    }

    /// One round: seats in one pipeline of HSETs (and maybe one DEL).
    pub async fn round(&mut self) -> Result<usize> {
        let mut picks = Vec::with_capacity(self.per_round + 1);
        for n in 0..self.per_round {
            let kind = InjectedKind::SEAT_KINDS[n % InjectedKind::SEAT_KINDS.len()];
            if let Some(pick) = self.pick_seat(kind) {
                picks.push(pick);
            }
        }
        self.rounds += 1;
        let r = self.rounds;
        let delete = self.delete_every > 0 && r >= 2 && (r - 2).is_multiple_of(self.delete_every);
        if delete && let Some(showtime) = self.pick_untouched() {
            picks.push((showtime, None, InjectedKind::DeletedHash));
        }
        let mut pipe = redis::pipe();
        for (showtime, seat, kind) in &picks {
            let key = self.bench.keys.seat(*showtime);
            match seat {
                Some(seat) => {
                    let value = [kind.seat().1];
                    pipe.cmd("HSET")
                        .arg(&key)
                        .arg(&self.estate.seat_names[*seat])
                        .arg(&value[..])
                        .ignore();
                }
                None => {
                    pipe.cmd("DEL").arg(&key).ignore();
                }
            }
        }
        // Before the write: an age measured from here is never too short.
        let injected_at = Utc::now();
        if !picks.is_empty() {
            // (Redis refuses an empty pipeline: `--inject 0`.)
            let mut conn = self.bench.redis.clone();
            pipe.query_async::<()>(&mut conn).await?;
        }
        let n = picks.len();
        for (showtime, seat, kind) in picks {
            self.log.push(Injected {
                showtime,
                seat: seat.map(|s| self.estate.seat_names[s].clone()),
                kind,
                injected_at,
            });
        }
        Ok(n)
    }

    /// A seat that can carry `kind`, in a random showtime, not drifted before.
    fn pick_seat(&mut self, kind: InjectedKind) -> Option<(i64, Option<usize>, InjectedKind)> {
        let (wanted, _) = kind.seat();
        for _ in 0..PICK_ATTEMPTS {
            let index = self.rng.random_range(0..self.estate.showtimes);
            let id = index as i64 + 1;
            if self.deleted.contains(&id) {
                continue;
            }
            // The estate is regenerated from its seed: what MySQL holds.
            let occupants = self.estate.occupants(index);
            let candidates: Vec<usize> = (0..occupants.len())
                .filter(|&s| occupants[s] == wanted && !self.taken.contains(&(id, s)))
                .collect();
            if candidates.is_empty() {
                continue;
            }
            let seat = candidates[self.rng.random_range(0..candidates.len())];
            self.taken.insert((id, seat));
            self.touched.insert(id);
            return Some((id, Some(seat), kind));
        }
        None
    }

    fn pick_untouched(&mut self) -> Option<i64> {
        for _ in 0..PICK_ATTEMPTS {
            let id = self.rng.random_range(1..=self.estate.showtimes as i64);
            if !self.touched.contains(&id) {
                self.touched.insert(id);
                self.deleted.insert(id);
                return Some(id);
            }
        }
        None
    }
}

/// One `reconcile_fix` row, as far as the soak cares.
pub struct FixRow {
    pub showtime: i64,
    pub seat: Option<String>,
    pub order_id: Option<i64>,
    pub job: String,
    pub kind: String,
    pub fixed_at: NaiveDateTime,
    /// What asked for the run that made it: a check's source (`event`,
    /// `grace`, `deadline`, `retry`), or `sweep`.
    pub found_by: String,
}

/// `showtime_id, seat_no, order_id, job, kind, fixed_at, found_by`, as read.
type FixTuple = (
    Option<i64>,
    Option<String>,
    Option<i64>,
    String,
    String,
    NaiveDateTime,
    String,
);

/// Every fix recorded since `since` (the audit of the whole soak).
pub async fn fixes_since(pool: &MySqlPool, since: DateTime<Utc>) -> Result<Vec<FixRow>> {
    let rows: Vec<FixTuple> = sqlx::query_as(
        "SELECT f.showtime_id, f.seat_no, f.order_id, f.job, f.kind, f.fixed_at, \
         COALESCE(JSON_VALUE(r.report, '$.check'), 'sweep') \
         FROM reconcile_fix f LEFT JOIN reconcile_run r ON r.run_id = f.run_id \
         WHERE f.fixed_at >= ?",
    )
    .bind(since.naive_utc())
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(showtime, seat, order_id, job, kind, fixed_at, found_by)| FixRow {
                showtime: showtime.unwrap_or(0),
                seat,
                order_id,
                job,
                kind,
                fixed_at,
                found_by,
            },
        )
        .collect())
}

/// How long injected drift lived before its repair.
#[derive(Debug, Default, Serialize)]
pub struct DriftAges {
    pub injected: usize,
    pub repaired: usize,
    pub not_repaired: usize,
    /// Of those not repaired, injected within the soak's last `recent_s` seconds.
    pub not_repaired_recent: usize,
    /// A few of the others (injected earlier, never repaired): their key.
    pub unrepaired_examples: Vec<String>,
    pub recent_s: f64,
    pub p50_s: Option<f64>,
    pub p90_s: Option<f64>,
    pub max_s: Option<f64>,
    pub by_kind: BTreeMap<InjectedKind, KindAges>,
}

#[derive(Debug, Default, Serialize)]
pub struct KindAges {
    pub injected: usize,
    pub repaired: usize,
    pub p50_s: Option<f64>,
    pub max_s: Option<f64>,
}

impl DriftAges {
    /// Why the soak must exit non-zero: drift injected earlier than the last
    /// `recent_s` seconds (time enough for a pass and the grace period) that
    /// no repair ever matched. `None` when there is none.
    pub fn verification_failure(&self) -> Option<String> {
        let old = self.not_repaired - self.not_repaired_recent;
        (old > 0).then(|| {
            format!(
                "verification failed: {old} injected drifts older than {:.0} s were never repaired, e.g. {}",
                self.recent_s,
                self.unrepaired_examples
                    .first()
                    .map_or("(no example kept)", String::as_str)
            )
        })
    }
}

/// Matches each injection with the first fix of the same seat (of the same
/// showtime's hash, for a deletion: `hash_rebuilt`) at or after it.
/// `seat_key` names a showtime's seat hash (for the examples).
pub fn ages(
    injected: &[Injected],
    fixes: &[FixRow],
    end: DateTime<Utc>,
    recent_s: f64,
    seat_key: impl Fn(i64) -> String,
) -> DriftAges {
    let mut by_seat: HashMap<(i64, Option<&str>), Vec<NaiveDateTime>> = HashMap::new();
    for f in fixes {
        let seat = if f.kind == "hash_rebuilt" {
            None
        } else {
            match f.seat.as_deref() {
                Some(s) => Some(s),
                None => continue,
            }
        };
        by_seat
            .entry((f.showtime, seat))
            .or_default()
            .push(f.fixed_at);
    }
    let mut out = DriftAges {
        injected: injected.len(),
        recent_s,
        ..DriftAges::default()
    };
    let mut all = Vec::new();
    let mut per_kind: BTreeMap<InjectedKind, Vec<f64>> = BTreeMap::new();
    for inj in injected {
        let at = inj.injected_at.naive_utc();
        let kind = out.by_kind.entry(inj.kind).or_default();
        kind.injected += 1;
        let repaired = by_seat
            .get(&(inj.showtime, inj.seat.as_deref()))
            .and_then(|times| times.iter().filter(|t| **t >= at).min());
        match repaired {
            Some(t) => {
                let age = (*t - at).num_milliseconds() as f64 / 1000.0;
                all.push(age);
                per_kind.entry(inj.kind).or_default().push(age);
                kind.repaired += 1;
                out.repaired += 1;
            }
            None => {
                out.not_repaired += 1;
                if (end - inj.injected_at).num_milliseconds() as f64 / 1000.0 <= recent_s {
                    out.not_repaired_recent += 1;
                } else if out.unrepaired_examples.len() < 5 {
                    let key = seat_key(inj.showtime);
                    out.unrepaired_examples.push(match &inj.seat {
                        Some(seat) => format!("{key} field {seat} ({:?})", inj.kind),
                        None => format!("{key} ({:?})", inj.kind),
                    });
                }
            }
        }
    }
    let (p50, p90, max) = quantiles(&mut all);
    (out.p50_s, out.p90_s, out.max_s) = (p50, p90, max);
    for (kind, mut v) in per_kind {
        let (p50, _, max) = quantiles(&mut v);
        let k = out.by_kind.entry(kind).or_default();
        (k.p50_s, k.max_s) = (p50, max);
    }
    out
}

/// p50, p90 and max (nearest rank).
fn quantiles(v: &mut [f64]) -> (Option<f64>, Option<f64>, Option<f64>) {
    v.sort_by(f64::total_cmp);
    (
        nearest_rank(v, 0.5),
        nearest_rank(v, 0.9),
        v.last().copied(),
    )
}

/// The `q` quantile of sorted `v`, by nearest rank (None when empty).
pub fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    (n > 0).then(|| sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn an_injection_is_matched_with_the_first_fix_after_it() {
        let inj = |showtime, seat: Option<&str>, kind, t| Injected {
            showtime,
            seat: seat.map(String::from),
            kind,
            injected_at: at(t),
        };
        let injected = vec![
            inj(
                1,
                Some("A-1"),
                InjectedKind::OrphanLock,
                "2026-01-01T00:00:00Z",
            ),
            inj(2, None, InjectedKind::DeletedHash, "2026-01-01T00:00:00Z"),
            inj(
                3,
                Some("A-2"),
                InjectedKind::SoldOrphan,
                "2026-01-01T00:09:00Z",
            ),
        ];
        let fix = |showtime, seat: Option<&str>, kind: &str, t| FixRow {
            showtime,
            seat: seat.map(String::from),
            order_id: None,
            job: "x".into(),
            kind: kind.into(),
            fixed_at: at(t).naive_utc(),
            found_by: "sweep".into(),
        };
        let fixes = vec![
            // An earlier fix of the same seat does not count.
            fix(1, Some("A-1"), "seat_released", "2025-12-31T23:59:00Z"),
            fix(1, Some("A-1"), "seat_released", "2026-01-01T00:02:30Z"),
            fix(1, Some("A-1"), "seat_released", "2026-01-01T00:03:30Z"),
            fix(2, None, "hash_rebuilt", "2026-01-01T00:00:40Z"),
        ];
        let key = |s: i64| format!("soak:seat:{{{s}}}");
        let a = ages(&injected, &fixes, at("2026-01-01T00:10:00Z"), 180.0, key);
        assert_eq!((a.injected, a.repaired, a.not_repaired), (3, 2, 1));
        assert_eq!(a.not_repaired_recent, 1);
        assert_eq!(a.verification_failure(), None, "only recent drift is left");
        assert_eq!(a.max_s, Some(150.0));
        assert_eq!(a.p50_s, Some(40.0));
        assert_eq!(a.by_kind[&InjectedKind::DeletedHash].repaired, 1);

        // The same audit, judged later: the sold orphan is old now.
        let later = ages(&injected, &fixes, at("2026-01-01T00:20:00Z"), 180.0, key);
        assert_eq!(
            later.verification_failure().as_deref(),
            Some(
                "verification failed: 1 injected drifts older than 180 s were never repaired, \
                 e.g. soak:seat:{3} field A-2 (SoldOrphan)"
            )
        );
    }
}
