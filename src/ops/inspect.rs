//! `inspect --showtime ID [--seat SEAT]`: one showtime's seat map, Redis
//! against what MySQL implies, for an operator answering "why does the app
//! show my seat as sold?". Loading is I/O; rendering is pure.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use serde::Serialize;

use crate::error::Result;
use crate::run::context::Context;
use std::sync::Arc;

use crate::model::contract::SeatRow;
use crate::model::{Kind, OrderStatus, Scope, SeatFields, Shard, ShowtimeId, Template};
use crate::plan::{self, Anomaly, Suspect};
use crate::run::jobs::seat_sweep::seen;
use crate::run::jobs::strict;
use crate::store::mysql::{AuditEntry, ShowtimeInfo, ShowtimeRow};
use crate::store::redis::HashRead;

#[derive(Debug, Clone, Serialize)]
pub struct SeatMap {
    pub showtime: ShowtimeInfo,
    pub key: String,
    /// `present`, `missing` or `wrong_type`.
    pub hash: &'static str,
    /// Whether some reconciler holds the showtime lease right now.
    #[serde(rename = "lock_held")]
    pub lease_held: bool,
    pub seats: Vec<SeatView>,
    /// Problems not tied to a template seat (unknown fields, wrong type, …).
    pub other_problems: Vec<String>,
    /// Rows of this showtime the contract does not explain (table, id, why):
    /// their seats are never lowered.
    pub unknown_rows: Vec<String>,
    pub drift: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct SeatView {
    pub seat: String,
    pub row: String,
    pub col: Option<i32>,
    pub enabled: bool,
    /// The raw Redis value; None when the field (or hash) is absent.
    pub redis: Option<String>,
    /// What MySQL implies: `"0"`, `"1"` or `"2"`; `"?"` when a row outside
    /// the contract may hold the seat (then it is never lowered).
    pub expected: &'static str,
    pub order: Option<OrderView>,
    /// The job that would repair this seat, if it differs.
    pub drift: Option<&'static str>,
    /// Bad data on this seat, if any.
    pub problem: Option<String>,
    /// Server time (ms) since which the seat has been an orphan suspect.
    pub suspect_since_ms: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OrderView {
    pub id: i64,
    pub order_no: String,
    pub status: &'static str,
    pub expires_at: Option<chrono::NaiveDateTime>,
}

/// Reads everything about one showtime. None when it does not exist.
pub async fn load(ctx: &Context, id: ShowtimeId) -> Result<Option<SeatMap>> {
    let Some(showtime) = ctx.mysql.showtime(id).await? else {
        return Ok(None);
    };
    let layout = ctx.mysql.layout(showtime.hall_id).await?;
    // For the orders' numbers and deadlines only: what the seats hold is
    // the pass's reading below.
    let occupants = ctx.mysql.occupants(id).await?;
    let lease_held = ctx
        .redis
        .get_string(&ctx.redis.keys.showtime_lease(id))
        .await?
        .is_some();

    // The showtime read and planned by the pass's own code: what it calls
    // drift is what a pass would repair (rule 17's holds included).
    let contract = ctx.mysql.judge_contract().await?;
    let row = ShowtimeRow {
        id,
        hall_id: showtime.hall_id,
        starts_at: showtime.starts_at.unwrap_or_default(),
    };
    let seen = seen::see(ctx, row, &contract).await?;
    // Whether a pass sweeps it at all (its drift is nobody's otherwise):
    // the pass's own page read, of this showtime, whichever shard has it.
    let scope = Scope {
        shard: Shard::ALL,
        only: &[id],
    };
    let swept = ctx.mysql.on_sale_page(None, None, 1, scope).await?;
    let on_sale = swept.rows.iter().any(|r| r.id == id);
    let (read, occupancy, plan) = (&seen.read, &seen.occupancy, &seen.plan);
    // Why a pass would not sweep it: its own row outside the contract, as
    // the pass reports it.
    let mut unknown = ctx.mysql.unknown_showtimes(scope, 2).await?;
    unknown.extend(seen.unknown.iter().cloned());
    let unknown_rows: Vec<String> = unknown.iter().map(|u| u.to_string()).collect();
    let empty = SeatFields::default();
    let (hash_word, fields) = match &read.hash {
        HashRead::Missing => ("missing", &empty),
        HashRead::WrongType => ("wrong_type", &empty),
        HashRead::Fields(f) => ("present", f),
    };
    let repairs: HashMap<&str, Kind> = plan
        .repairs
        .iter()
        .map(|r| (r.seat.as_str(), r.kind))
        .collect();
    let mut problems: HashMap<String, String> = HashMap::new();
    let mut other_problems = Vec::new();
    for a in &plan.anomalies {
        match a {
            Anomaly::InvalidValue { seat, .. } => {
                problems.insert(seat.clone(), a.describe());
            }
            _ => other_problems.push(a.describe()),
        }
    }
    let seats = layout
        .into_iter()
        .map(|s| {
            let truth = occupancy.of(id).get(&s.seat_no);
            let occupant = occupants.iter().find(|o| {
                o.seat_no.as_ref() == Some(&s.seat_no) && matches!(o.reading, SeatRow::Occupies(_))
            });
            let drift = if !s.enabled || !on_sale {
                None
            } else if plan.rebuild.is_some() {
                Some(Kind::MissingHashes.cli_name())
            } else {
                repairs.get(s.seat_no.as_str()).map(|k| k.cli_name())
            };
            SeatView {
                redis: fields.get(&s.seat_no),
                expected: if truth.unknown {
                    "?"
                } else {
                    truth.expected().as_redis()
                },
                order: occupant.map(|o| OrderView {
                    id: o.order_id.unwrap_or_default(),
                    order_no: o.order_no.clone(),
                    status: match o.reading {
                        SeatRow::Occupies(OrderStatus::Paid) => "PAID",
                        _ => "PENDING",
                    },
                    expires_at: o.expires_at,
                }),
                drift,
                problem: problems.remove(&s.seat_no).or_else(|| {
                    truth
                        .unknown
                        .then(|| "a row outside the contract may hold it: never lowered".into())
                }),
                suspect_since_ms: read
                    .suspects
                    .get(&s.seat_no)
                    .and_then(|raw| Suspect::decode(raw))
                    .map(|x| x.first_seen_ms),
                seat: s.seat_no,
                row: s.row_label.unwrap_or_else(|| "?".into()),
                col: s.col_no,
                enabled: s.enabled,
            }
        })
        .collect::<Vec<_>>();
    let drift = seats.iter().filter(|s| s.drift.is_some()).count();
    Ok(Some(SeatMap {
        key: ctx.redis.keys.seat(id),
        showtime,
        hash: hash_word,
        lease_held,
        seats,
        other_problems,
        unknown_rows,
        drift,
    }))
}

const RED: &str = "\x1b[31;1m";
const YELLOW: &str = "\x1b[33;1m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";

impl SeatMap {
    #[allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "plain data of ours serializes"
    )]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("seat map serializes")
    }

    /// The map as text; `color` adds ANSI colours (for a terminal).
    pub fn render(&self, color: bool) -> String {
        let s = &self.showtime;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "showtime {} · hall {} · {} · starts {} UTC",
            s.id,
            s.hall_id,
            s.status,
            s.starts_at
                .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_else(|| format!("{} (does not decode)", s.starts_at_raw))
        );
        let fields = self
            .seats
            .iter()
            .filter(|v| v.enabled && v.redis.is_some())
            .count();
        let _ = writeln!(
            out,
            "hash {}: {}{} · showtime lease: {}",
            self.key,
            self.hash.replace('_', " "),
            if self.hash == "present" {
                format!(" ({fields} template fields)")
            } else {
                String::new()
            },
            if self.lease_held { "held" } else { "free" }
        );
        let mut rows: BTreeMap<&str, Vec<&SeatView>> = BTreeMap::new();
        for v in &self.seats {
            rows.entry(v.row.as_str()).or_default().push(v);
        }
        let cols: std::collections::BTreeSet<i32> =
            self.seats.iter().filter_map(|v| v.col).collect();
        let width = rows.keys().map(|r| r.len()).max().unwrap_or(1).max(3);
        let _ = write!(out, "\n{:width$} ", "");
        for c in &cols {
            let _ = write!(out, "{c:>2} ");
        }
        out.push('\n');
        for (row, seats) in &rows {
            let _ = write!(out, "{row:>width$} ");
            for c in &cols {
                match seats.iter().find(|v| v.col == Some(*c)) {
                    Some(v) => out.push_str(&cell(v, color)),
                    None => out.push_str("   "),
                }
            }
            // Seats without a column go at the end of their row.
            for v in seats.iter().filter(|v| v.col.is_none()) {
                out.push_str(&cell(v, color));
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\nlegend: 0 free · 1 locked · 2 sold · . absent · - disabled seat · * differs from MySQL · ! invalid value"
        );
        if self.hash == "missing" && self.drift > 0 {
            let _ = writeln!(
                out,
                "\nthe hash is missing: missing-hashes rebuilds all {} seats from the template; occupied seats:",
                self.drift
            );
        }
        let drifted: Vec<&SeatView> = self
            .seats
            .iter()
            .filter(|v| v.drift.is_some() || v.problem.is_some())
            // For a missing hash, free seats say nothing the line above did not.
            .filter(|v| self.hash != "missing" || v.expected != "0")
            .collect();
        if !self.unknown_rows.is_empty() {
            let _ = writeln!(
                out,
                "\nrows outside the contract (their seats are never lowered):"
            );
            for u in &self.unknown_rows {
                let _ = writeln!(out, "  {u}");
            }
        }
        if drifted.is_empty() && self.other_problems.is_empty() {
            // Never "no drift" when there is no hash to agree.
            let verdict = match self.hash {
                "missing" if self.drift > 0 => {
                    "no seat is occupied: the rebuilt hash shows every seat free"
                }
                "missing" => {
                    "the hash is missing; the showtime is not ON_SALE, so the reconciler leaves it alone"
                }
                "wrong_type" => "the seat key is not a hash: left for an operator",
                _ => "no drift: Redis agrees with MySQL",
            };
            let _ = writeln!(out, "\n{verdict}");
            return out;
        }
        if !drifted.is_empty() && self.hash != "missing" {
            let _ = writeln!(out, "\n{} seat(s) differ:", drifted.len());
        }
        for v in drifted {
            let redis = v.redis.as_deref().unwrap_or("absent");
            let order = v
                .order
                .as_ref()
                .map(|o| format!(" ({} order {})", o.status, o.id))
                .unwrap_or_default();
            let action = match (v.drift, &v.problem) {
                (_, Some(p)) => format!("left for an operator: {p}"),
                (Some(job), None) => format!("{job} sets {}", v.expected),
                (None, None) => String::new(),
            };
            let suspect = if v.suspect_since_ms.is_some() {
                " [suspect]"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {:<8} redis {:<6} mysql {}{:<22} {action}{suspect}",
                v.seat, redis, v.expected, order
            );
        }
        for p in &self.other_problems {
            let _ = writeln!(out, "  {p}");
        }
        out
    }

    /// Everything known about one seat, with its last repairs.
    pub fn seat_detail(&self, seat: &str, fixes: &[AuditEntry]) -> Option<String> {
        let v = self.seats.iter().find(|v| v.seat == seat)?;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "seat {} of showtime {} (row {}, column {})",
            v.seat,
            self.showtime.id,
            v.row,
            v.col.map(|c| c.to_string()).unwrap_or("?".into())
        );
        let _ = writeln!(
            out,
            "  enabled in template: {}",
            if v.enabled { "yes" } else { "no" }
        );
        let _ = writeln!(
            out,
            "  redis {} field {}: {}",
            self.key,
            v.seat,
            v.redis.as_deref().unwrap_or("absent")
        );
        let _ = writeln!(out, "  mysql implies: {}", v.expected);
        match &v.order {
            Some(o) => {
                let _ = writeln!(
                    out,
                    "  occupied by order {} ({}) status {} expires_at {} UTC",
                    o.id,
                    o.order_no,
                    o.status,
                    o.expires_at
                        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                        .unwrap_or_else(|| "(does not decode)".into())
                );
            }
            None => {
                let _ = writeln!(out, "  occupied by: no valid order");
            }
        }
        let verdict = match (&v.problem, v.drift) {
            (Some(p), _) => format!("bad data, left for an operator: {p}"),
            (None, Some(job)) => format!("drift: {job} would set {}", v.expected),
            (None, None) => "consistent".into(),
        };
        let _ = writeln!(out, "  verdict: {verdict}");
        if let Some(ms) = v.suspect_since_ms {
            let since = chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  orphan suspect since {since} UTC (repaired once older than reconcile.orphan_grace)"
            );
        }
        if fixes.is_empty() {
            let _ = writeln!(out, "  no repairs recorded in reconcile_fix");
        } else {
            let _ = writeln!(out, "  last repairs (reconcile_fix):");
            for f in fixes {
                let _ = writeln!(
                    out,
                    "    {} {:<14} {:<13} {} -> {} order {} run {} on {}",
                    f.fixed_at.format("%Y-%m-%d %H:%M:%S"),
                    f.job,
                    f.kind,
                    f.before.as_deref().unwrap_or("-"),
                    f.after.as_deref().unwrap_or("-"),
                    f.order_id.map(|o| o.to_string()).unwrap_or("-".into()),
                    f.run_id,
                    f.instance
                );
            }
        }
        Some(out)
    }
}

fn cell(v: &SeatView, color: bool) -> String {
    let (text, mark) = if !v.enabled {
        ("-".to_string(), ' ')
    } else {
        let value = v.redis.clone().unwrap_or_else(|| ".".into());
        // An invalid value shows as itself when it is one character, else "?".
        let shown = if value.chars().count() == 1 {
            value
        } else {
            "?".into()
        };
        let mark = if v.problem.is_some() {
            '!'
        } else if v.drift.is_some() {
            '*'
        } else {
            ' '
        };
        (shown, mark)
    };
    let plain = format!("{text:>2}{mark}");
    if !color {
        return plain;
    }
    match mark {
        '*' => format!("{RED}{plain}{RESET}"),
        '!' => format!("{YELLOW}{plain}{RESET}"),
        _ if !v.enabled => format!("{DIM}{plain}{RESET}"),
        _ => plain,
    }
}

/// A seat of an ON_SALE showtime whose Redis value differs from what MySQL
/// implies (`redis` None: field or hash absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub showtime: ShowtimeId,
    pub seat: String,
    pub redis: Option<String>,
    pub expected: &'static str,
}

/// Every difference across the context's ON_SALE showtimes, page by page: the
/// contract's invariant as a check (the demo's and the chaos test's verdict).
pub async fn differences(ctx: &Context) -> Result<Vec<Difference>> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let read = ctx
            .mysql
            .on_sale_page(after, None, 500, ctx.scope(&[]))
            .await?;
        if read.read == 0 {
            break;
        }
        after = read.last;
        let page = read.rows;
        let ids: Vec<ShowtimeId> = page.iter().map(|s| s.id).collect();
        let halls: Vec<i64> = page.iter().map(|s| s.hall_id).collect();
        let templates: HashMap<i64, Arc<Template>> = ctx
            .mysql
            .templates(&halls)
            .await?
            .0
            .into_iter()
            .map(|(h, t)| (h, Arc::new(t)))
            .collect();
        let read = ctx.mysql.occupancy(&ids).await?;
        let occupancy = strict::name_seats(ctx, &page, &templates, read)
            .await?
            .occupancy;
        let (_, reads) = ctx.redis.read_showtimes(&ids, false).await?;
        for (s, read) in page.iter().zip(&reads) {
            let fields = match &read.hash {
                HashRead::Fields(f) => f.to_map(),
                _ => HashMap::new(),
            };
            let expected = plan::expected_hash(&templates[&s.hall_id], occupancy.of(s.id));
            for (seat, state) in expected {
                let redis = fields.get(&seat).cloned();
                if redis.as_deref() != Some(state.as_redis()) {
                    out.push(Difference {
                        showtime: s.id,
                        seat,
                        redis,
                        expected: state.as_redis(),
                    });
                }
            }
        }
        if page.len() < 500 {
            break;
        }
    }
    Ok(out)
}
