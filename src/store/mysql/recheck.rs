//! The re-check right before a write, asked in MySQL's own terms (rules 4
//! and 15): exactly the planned seats, compared with the column's collation.

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::contract::{self, SeatRow, UnknownRow};
use crate::model::{OrderStatus, SeatNo, SeatRows, SeatTruth, ShowtimeId};
use sqlx::{MySql, QueryBuilder, Row};

/// A seat as the re-check sees it, asked in MySQL's own terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeatHistory {
    /// The valid occupancy, and whether a row outside the contract may hold it.
    pub truth: SeatTruth,
    /// Every row on the seat, as read: the latest created/paid/cancelled
    /// time of their orders (UTC ms) and their mark (rule 4's "continuously").
    pub rows: SeatRows,
    /// The order of the valid occupancy (the paid one, if two claim the
    /// seat), for the audit of a repair it explains.
    pub order_id: Option<i64>,
}

/// `CASE <owner> WHEN S THEN FIELD(os.seat_no, <S's asked seats>) … END`:
/// the 1-based place, among its showtime's asked seats, of the seat that
/// MySQL's comparison of `os.seat_no` takes for the row's (0: none).
fn push_position(
    q: &mut QueryBuilder<MySql>,
    owner: &str,
    asked: &[&(ShowtimeId, Vec<usize>)],
    seats: &[(ShowtimeId, SeatNo, bool)],
) {
    q.push(format_args!("CASE {owner}"));
    for (s, idx) in asked {
        q.push(" WHEN ")
            .push_bind(*s)
            .push(" THEN FIELD(os.seat_no");
        for &i in idx {
            q.push(", ").push_bind(seats[i].1.as_str());
        }
        q.push(")");
    }
    q.push(" ELSE 0 END");
}

/// One statement of the re-check: the rows MySQL's comparison takes for
/// the `asked` seats, in their showtime (`elsewhere` false), or the rows of
/// their showtime's orders that sit in another showtime (true). Either
/// returns `asked_showtime` and `pos` (the seat's place among its
/// showtime's asked seats) with the row's columns.
fn history_query(
    asked: &[&(ShowtimeId, Vec<usize>)],
    seats: &[(ShowtimeId, SeatNo, bool)],
    elsewhere: bool,
) -> QueryBuilder<MySql> {
    let owner = if elsewhere {
        "mine.showtime_id"
    } else {
        "os.showtime_id"
    };
    let mut q = QueryBuilder::<MySql>::new(SEAT_ROW_COLUMNS);
    q.push(", ").push(owner).push(" AS asked_showtime, ");
    push_position(&mut q, owner, asked, seats);
    if elsewhere {
        // `mine` finds the showtime's orders in the index
        // (showtime_id, status) alone, without reading one order row: a
        // showtime has about a hundred orders, and only the rare row in
        // another showtime is worth its order's row (`o`, by primary key).
        q.push(
            " AS pos FROM ticket_order mine \
             JOIN order_seat os ON os.order_id = mine.id \
             JOIN ticket_order o ON o.id = os.order_id \
             WHERE os.showtime_id <> mine.showtime_id",
        );
        push_in(
            &mut q,
            "mine.showtime_id",
            &asked.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        );
        q.push(" AND ");
        push_position(&mut q, owner, asked, seats);
        q.push(" > 0");
    } else {
        // One range of `uq_occupancy` per showtime: `(showtime_id, seat_no)
        // IN (pairs)` is the same comparison, but MariaDB turns a long list
        // of pairs into a table it joins on `showtime_id` alone, reading
        // every row of the showtime once per asked seat.
        q.push(
            " AS pos FROM order_seat os LEFT JOIN ticket_order o ON o.id = os.order_id \
             WHERE (",
        );
        for (n, (s, idx)) in asked.iter().enumerate() {
            q.push(if n == 0 { "" } else { " OR " })
                .push("(os.showtime_id = ")
                .push_bind(*s)
                .push(" AND os.seat_no IN (");
            let mut sep = q.separated(", ");
            for &i in idx {
                sep.push_bind(seats[i].1.as_str());
            }
            q.push("))");
        }
        q.push(")");
    }
    q
}

/// One row whose seat number is not a template seat byte for byte, with
/// the enabled template seats of its showtime's hall.
#[derive(Debug, Clone, Copy)]
pub struct SeatNameAsk<'a> {
    pub order_id: i64,
    pub seat_no: &'a str,
    pub candidates: &'a [SeatNo],
}

impl MysqlStore {
    /// Which of `candidates` each row's seat number names under MySQL's own
    /// comparison of `order_seat.seat_no` (the column's collation, as
    /// `uq_occupancy` compares): `a-01` and `A-01 ` name `A-01`. One row per
    /// ask, found by its key (`order_id`, `seat_no`); `FIELD` compares the
    /// column with the candidates in the column's collation.
    pub async fn seats_named(&self, asks: &[SeatNameAsk<'_>]) -> Result<Vec<Option<SeatNo>>> {
        let mut out = vec![None; asks.len()];
        let mut from = 0;
        while from < asks.len() {
            // Stay well inside the 65,535 placeholders of one statement.
            let mut to = from;
            let mut binds = 0;
            while to < asks.len() && (to == from || binds + asks[to].candidates.len() + 3 < 30_000)
            {
                binds += asks[to].candidates.len() + 3;
                to += 1;
            }
            let mut q = QueryBuilder::<MySql>::new("");
            for (i, ask) in asks[from..to].iter().enumerate() {
                if i > 0 {
                    q.push(" UNION ALL ");
                }
                q.push("SELECT ")
                    .push_bind((from + i) as i64)
                    .push(" AS i, FIELD(os.seat_no");
                for c in ask.candidates {
                    q.push(", ").push_bind(c.as_str());
                }
                q.push(") AS pos FROM order_seat os WHERE os.order_id = ")
                    .push_bind(ask.order_id)
                    .push(" AND os.seat_no = ")
                    .push_bind(ask.seat_no);
            }
            for r in q.build().fetch_all(&self.pool).await? {
                let i: i64 = r.try_get("i")?;
                let pos: i64 = r.try_get("pos")?;
                let ask = &asks[i as usize];
                if pos > 0 {
                    out[i as usize] = ask.candidates.get(pos as usize - 1).cloned();
                }
            }
            from = to;
        }
        Ok(out)
    }

    /// Exactly these seats, read now and asked in MySQL's own terms (the
    /// re-check right before a write, rules 4 and 15): every row whose seat
    /// number the column's collation takes for the seat, in the seat's
    /// showtime, and, where `lowering`, the rows of the showtime's orders
    /// that sit in another showtime. Returns one entry per seat, in order,
    /// and the rows outside the contract among them.
    pub async fn seat_history(
        &self,
        seats: &[(ShowtimeId, SeatNo, bool)],
    ) -> Result<(Vec<SeatHistory>, Vec<UnknownRow>)> {
        let mut out = vec![SeatHistory::default(); seats.len()];
        let mut unknown = Vec::new();
        // (showtime → its asked seats' indexes), per statement of at most
        // `PER_STATEMENT` seats.
        const PER_STATEMENT: usize = 2_000;
        for part in (0..seats.len()).collect::<Vec<_>>().chunks(PER_STATEMENT) {
            let mut by_showtime: Vec<(ShowtimeId, Vec<usize>)> = Vec::new();
            for &i in part {
                match by_showtime.iter_mut().find(|(s, _)| *s == seats[i].0) {
                    Some((_, v)) => v.push(i),
                    None => by_showtime.push((seats[i].0, vec![i])),
                }
            }
            let lowering: Vec<&(ShowtimeId, Vec<usize>)> = by_showtime
                .iter()
                .filter(|(_, v)| v.iter().any(|&i| seats[i].2))
                .collect();
            let all: Vec<&(ShowtimeId, Vec<usize>)> = by_showtime.iter().collect();
            // Two statements, on two connections at once: both are read
            // after the showtime leases were taken and before the write,
            // and neither waits for the other.
            let mut in_showtime = history_query(&all, seats, false);
            let mut elsewhere =
                (!lowering.is_empty()).then(|| history_query(&lowering, seats, true));
            let (rows_in_showtime, rows_elsewhere) =
                tokio::try_join!(in_showtime.build().fetch_all(&self.pool), async {
                    match &mut elsewhere {
                        Some(q) => q.build().fetch_all(&self.pool).await,
                        None => Ok(Vec::new()),
                    }
                })?;
            for (asked, rows) in [
                (&all[..], rows_in_showtime),
                (&lowering[..], rows_elsewhere),
            ] {
                for r in rows {
                    let asked_showtime: i64 = r.try_get("asked_showtime")?;
                    let pos: Option<i64> = r.try_get("pos")?;
                    let Some(i) = asked
                        .iter()
                        .find(|(s, _)| *s == asked_showtime)
                        .and_then(|(_, idx)| idx.get(pos.unwrap_or(0).max(1) as usize - 1))
                        .filter(|_| pos.unwrap_or(0) > 0)
                        .copied()
                    else {
                        continue;
                    };
                    let facts = seat_row_facts(&r)?;
                    let mut reading = contract::read_seat_row(&facts);
                    if matches!(reading, SeatRow::Occupies(_)) && facts.seat_no != seats[i].1 {
                        // A valid occupancy is spelled as the template spells
                        // the seat; MySQL's comparison only found this one.
                        reading = SeatRow::Unknown(format!(
                            "seat_no {:?} is the template's {:?} only under the collation",
                            facts.seat_no, seats[i].1
                        ));
                    }
                    let entry = &mut out[i];
                    unknown.extend(reading.unknown_row(facts.order_id, &facts.seat_no));
                    if let Some(holding) = reading.holding(facts.order_id) {
                        entry.truth.add(holding);
                    }
                    if let SeatRow::Occupies(status) = reading
                        && (entry.order_id.is_none() || status == OrderStatus::Paid)
                    {
                        entry.order_id = Some(facts.order_id);
                    }
                    // An order's time that does not decode counts as "just
                    // now": the grace period can only start later (rule 4).
                    let ms = match (&facts.order, order_dates(&r)) {
                        (None, _) => None,
                        (Some(_), Ok(t)) => Some(t.and_utc().timestamp_millis()),
                        (Some(_), Err(_)) => Some(i64::MAX),
                    };
                    entry.rows.mark.add(&facts, ms);
                    if let Some(ms) = ms {
                        let last = &mut entry.rows.last_activity_ms;
                        *last = Some(last.map_or(ms, |m: i64| m.max(ms)));
                    }
                }
            }
        }
        Ok((out, unknown))
    }
}
