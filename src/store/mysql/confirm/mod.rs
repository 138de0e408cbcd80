//! The confirmation right before a write, asked in MySQL's own terms (rules 4
//! and 15): exactly the planned seats, compared with the column's collation.

mod elsewhere;

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::contract::{self, SeatRow, SeatRowFacts, UnknownRow};
use crate::model::holds::SeatHold;
use crate::model::seat_names::read_as;
use crate::model::{OrderStatus, SeatNo, SeatRows, SeatTruth, ShowtimeId};
use elsewhere::rows_elsewhere;
use sqlx::{MySql, QueryBuilder};

/// A seat as the confirmation sees it, asked in MySQL's own terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeatConfirmation {
    /// The valid occupancy, and whether a row outside the contract may hold it.
    pub truth: SeatTruth,
    /// Every row on the seat, as read: the latest created/paid/cancelled
    /// time of their orders (UTC ms) and their mark (rule 4's "continuously").
    pub rows: SeatRows,
    /// The order of the valid occupancy (the paid one, if two claim the
    /// seat), for the audit of a repair it explains.
    pub order_id: Option<i64>,
}

/// A showtime and its asked seats (their indexes in the asked list): the
/// `WHEN` of a `CASE`, the `FIELD` and the `IN` of the confirmation's
/// statements, none of which may be built empty.
pub(super) type Asked<'a> = (ShowtimeId, NonEmpty<'a, usize>);

/// `CASE <owner> WHEN S THEN FIELD(os.seat_no, <S's asked seats>) … END`:
/// the 1-based place, among its showtime's asked seats, of the seat that
/// MySQL's comparison of `os.seat_no` takes for the row's (0: none).
fn push_position(
    q: &mut QueryBuilder<MySql>,
    owner: &str,
    asked: NonEmpty<'_, Asked<'_>>,
    seats: &[(ShowtimeId, SeatNo, bool)],
) {
    q.push(format_args!("CASE {owner}"));
    for (s, idx) in asked.iter() {
        q.push(" WHEN ")
            .push_bind(*s)
            .push(" THEN FIELD(os.seat_no, ");
        push_list(q, idx.iter().map(|&i| seats[i].1.as_str()));
        q.push(")");
    }
    q.push(" ELSE 0 END");
}

/// One statement of the confirmation: the rows MySQL's comparison takes for
/// the `asked` seats, in their showtime (`elsewhere` false), or the rows of
/// their showtime's orders that sit in another showtime (true). Either
/// returns `asked_showtime` and `pos` (the seat's place among its
/// showtime's asked seats) with the row's columns.
pub(super) fn confirm_query(
    asked: NonEmpty<'_, Asked<'_>>,
    seats: &[(ShowtimeId, SeatNo, bool)],
    elsewhere: bool,
    null_seats: bool,
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
        let showtimes: Vec<ShowtimeId> = asked.iter().map(|(s, _)| *s).collect();
        if let Some(showtimes) = NonEmpty::of(&showtimes) {
            push_in(&mut q, "mine.showtime_id", showtimes);
        }
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
            push_list(&mut q, idx.iter().map(|&i| seats[i].1.as_str()));
            // A row with no seat_no (a NULL-able column) may hold any seat
            // of its showtime: the same index range.
            q.push(if null_seats {
                ") OR os.seat_no IS NULL)"
            } else {
                "))"
            });
        }
        q.push(")");
    }
    q
}

/// The rows with no showtime (a NULL-able `order_seat.showtime_id`) whose
/// seat number MySQL's comparison takes for an asked seat: an index range
/// of `uq_occupancy`. Each holds the seat it names in its order's showtime
/// (`asked_showtime`, `pos` as in [`confirm_query`]), or, when the order's
/// showtime does not decode, any asked seat.
fn null_showtime_query(
    asked: NonEmpty<'_, Asked<'_>>,
    seats: &[(ShowtimeId, SeatNo, bool)],
    part: NonEmpty<'_, usize>,
) -> QueryBuilder<MySql> {
    let mut q = QueryBuilder::<MySql>::new(SEAT_ROW_COLUMNS);
    q.push(", o.showtime_id AS asked_showtime, ");
    push_position(&mut q, "o.showtime_id", asked, seats);
    q.push(
        " AS pos FROM order_seat os LEFT JOIN ticket_order o ON o.id = os.order_id \
         WHERE os.showtime_id IS NULL AND os.seat_no IN (",
    );
    push_list(&mut q, part.iter().map(|&i| seats[i].1.as_str()));
    q.push(")");
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

/// `SELECT i, FIELD(os.seat_no, <candidates>) … UNION ALL …`: for each ask
/// (its index in `asks`, its candidates), the place of the candidate that
/// MySQL's comparison of `os.seat_no` takes for the row's seat (0: none).
fn seats_named_query(
    asks: &[SeatNameAsk<'_>],
    part: NonEmpty<'_, (usize, NonEmpty<'_, SeatNo>)>,
) -> QueryBuilder<MySql> {
    let mut q = QueryBuilder::<MySql>::new("");
    for (n, (i, candidates)) in part.iter().enumerate() {
        if n > 0 {
            q.push(" UNION ALL ");
        }
        q.push("SELECT ")
            .push_bind(*i as i64)
            .push(" AS i, FIELD(os.seat_no, ");
        push_list(&mut q, candidates.iter().map(String::as_str));
        q.push(") AS pos FROM order_seat os WHERE os.order_id = ")
            .push_bind(asks[*i].order_id)
            .push(" AND os.seat_no = ")
            .push_bind(asks[*i].seat_no);
    }
    q
}

impl MysqlStore {
    /// Which of `candidates` each row's seat number names under MySQL's own
    /// comparison of `order_seat.seat_no` (the column's collation, as
    /// `uq_occupancy` compares): `a-01` and `A-01 ` name `A-01`. One row per
    /// ask, found by its key (`order_id`, `seat_no`); `FIELD` compares the
    /// column with the candidates in the column's collation.
    pub async fn seats_named(&self, asks: &[SeatNameAsk<'_>]) -> Result<Vec<Option<SeatNo>>> {
        let mut out = vec![None; asks.len()];
        // A row of a hall with no enabled seat names none: no `FIELD` with
        // nothing to compare (MySQL refuses it, 1582, for the whole chunk).
        let askable: Vec<(usize, NonEmpty<'_, SeatNo>)> = asks
            .iter()
            .enumerate()
            .filter_map(|(i, ask)| Some((i, NonEmpty::of(ask.candidates)?)))
            .collect();
        let mut from = 0;
        while from < askable.len() {
            // Stay well inside the 65,535 placeholders of one statement.
            let mut to = from;
            let mut binds = 0;
            while to < askable.len()
                && (to == from || binds + askable[to].1.items().len() + 3 < 30_000)
            {
                binds += askable[to].1.items().len() + 3;
                to += 1;
            }
            let Some(part) = NonEmpty::of(&askable[from..to]) else {
                break;
            };
            for r in seats_named_query(asks, part)
                .build()
                .fetch_all(&self.pool)
                .await?
            {
                let (Ok(i), Ok(pos)) = (int(&r, "i"), int(&r, "pos")) else {
                    continue;
                };
                let (Ok(i), Ok(pos)) = (usize::try_from(i), usize::try_from(pos)) else {
                    continue;
                };
                if let (Some(ask), Some(at)) = (asks.get(i), pos.checked_sub(1)) {
                    out[i] = ask.candidates.get(at).cloned();
                }
            }
            from = to;
        }
        Ok(out)
    }

    /// Exactly these seats, read now and asked in MySQL's own terms (the
    /// confirmation right before a write, rules 4 and 15): every row whose seat
    /// number the column's collation takes for the seat, in the seat's
    /// showtime, and, where `lowering`, the rows of the showtime's orders
    /// that sit in another showtime. Where the schema deviates (rule 17):
    /// rows with no seat number or no showtime that may hold the seat, a
    /// seat that is one seat to MySQL with another template seat, and the
    /// showtimes the deviations hold, make the seat unknown (never
    /// lowered). Returns one entry per seat, in order, and the rows outside
    /// the contract among them.
    ///
    /// A row whose seat name only reads as the seat to a person (rule 17,
    /// `model::seat_names`) is not asked here: the sweep's own read of the
    /// showtimes names such rows ([`crate::model::seat_names`] in
    /// `jobs::strict`), and no lowering is planned on their seat. A write
    /// planned without that read asks [`MysqlStore::confirm_seats_as_read`].
    pub async fn confirm_seats(
        &self,
        seats: &[(ShowtimeId, SeatNo, bool)],
    ) -> Result<(Vec<SeatConfirmation>, Vec<UnknownRow>)> {
        self.confirm(seats, false).await
    }

    /// [`MysqlStore::confirm_seats`], and where a seat is lowered, also the
    /// rows of its showtime whose seat name reads as the seat to a person
    /// (NFKC, case, invisible characters): the seat is then unknown, never
    /// lowered. For the cancel chain's release, which reads no showtime
    /// before (a read of the showtime's held rows, from `uq_occupancy`).
    pub async fn confirm_seats_as_read(
        &self,
        seats: &[(ShowtimeId, SeatNo, bool)],
    ) -> Result<(Vec<SeatConfirmation>, Vec<UnknownRow>)> {
        self.confirm(seats, true).await
    }

    async fn confirm(
        &self,
        seats: &[(ShowtimeId, SeatNo, bool)],
        as_read: bool,
    ) -> Result<(Vec<SeatConfirmation>, Vec<UnknownRow>)> {
        let contract = self.contract();
        let shape = &contract.shape;
        let mut out = vec![SeatConfirmation::default(); seats.len()];
        let mut unknown = Vec::new();
        // Template seats MySQL takes for one (rule 17): a row on one of them
        // is on all, and none of them is lowered.
        let mut showtimes: Vec<ShowtimeId> = seats.iter().map(|s| s.0).collect();
        showtimes.sort_unstable();
        showtimes.dedup();
        let groups = match (&shape.seat_groups, NonEmpty::of(&showtimes)) {
            (Some((charset, collation)), Some(showtimes)) => {
                self.seat_groups(
                    charset,
                    collation,
                    super::schema::GroupsOf::Showtimes(showtimes),
                )
                .await?
                .0
            }
            _ => Vec::new(),
        };
        let group_of = |i: usize| {
            groups
                .iter()
                .position(|(s, members)| *s == seats[i].0 && members.contains(&seats[i].1))
        };
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
            // Each showtime was pushed with its first seat: none is empty.
            let all: Vec<Asked<'_>> = by_showtime
                .iter()
                .filter_map(|(s, v)| Some((*s, NonEmpty::of(v)?)))
                .collect();
            let lowering: Vec<Asked<'_>> = all
                .iter()
                .filter(|(_, v)| v.iter().any(|&i| seats[i].2))
                .copied()
                .collect();
            let (Some(every), Some(part_seats)) = (NonEmpty::of(&all), NonEmpty::of(part)) else {
                continue;
            };
            // The statements run on their own connections at once: all are
            // read after the showtime leases were taken and before the
            // write, and none waits for another.
            let mut in_showtime = confirm_query(every, seats, false, shape.null_seat_rows);
            let mut no_showtime = shape
                .null_showtime_rows
                .then(|| null_showtime_query(every, seats, part_seats));
            let mut look_alikes = NonEmpty::of(&lowering)
                .filter(|_| as_read)
                .map(look_alike_query);
            let (rows_in_showtime, rows_elsewhere, rows_no_showtime, rows_look_alike) = tokio::try_join!(
                in_showtime.build().fetch_all(&self.pool),
                rows_elsewhere(&self.pool, &lowering, seats, shape.null_seat_rows),
                fetch_if(&self.pool, no_showtime.as_mut()),
                fetch_if(&self.pool, look_alikes.as_mut()),
            )?;
            hold_look_alikes(&lowering, seats, &rows_look_alike, &mut out, &mut unknown);
            for (asked, rows, anywhere) in [
                (&all[..], rows_in_showtime, false),
                (&lowering[..], rows_elsewhere, false),
                (&all[..], rows_no_showtime, true),
            ] {
                for r in rows {
                    let facts = seat_row_facts(&r);
                    let owner = int(&r, "asked_showtime");
                    let Some((_, idx)) = owner
                        .as_ref()
                        .ok()
                        .and_then(|o| asked.iter().find(|(s, _)| s == o))
                    else {
                        // A row with no showtime whose order names none
                        // either: any asked seat it may name.
                        if anywhere && owner.is_err() {
                            for &i in part {
                                hold_row(&mut out[i], &mut unknown, &facts, &r, None);
                            }
                        }
                        continue;
                    };
                    if facts.seat_no.is_err() {
                        // No seat number: any asked seat of the showtime.
                        for &i in idx.iter() {
                            hold_row(&mut out[i], &mut unknown, &facts, &r, None);
                        }
                        continue;
                    }
                    let pos = int(&r, "pos").unwrap_or(0);
                    let Some(&i) = usize::try_from(pos - 1)
                        .ok()
                        .and_then(|p| idx.items().get(p))
                    else {
                        continue;
                    };
                    // MySQL's FIELD names the first asked seat it takes the
                    // row for; the others of its group are the same seat.
                    let group = group_of(i);
                    for &j in idx.iter() {
                        if j == i || (group.is_some() && group_of(j) == group) {
                            hold_row(&mut out[j], &mut unknown, &facts, &r, Some(&seats[j].1));
                        }
                    }
                }
            }
        }
        for (i, ((showtime, _, _), entry)) in seats.iter().zip(&mut out).enumerate() {
            if group_of(i).is_some() || contract.holds.seat(*showtime).0 != SeatHold::None {
                entry.truth.unknown = true;
            }
        }
        Ok((out, unknown))
    }
}

/// The rows of the lowering showtimes that hold a seat (`active` set): the
/// showtime, order and seat of each, from `uq_occupancy` alone. Their
/// names are compared with the asked seats' as a person reads them
/// ([`hold_look_alikes`]).
fn look_alike_query(lowering: NonEmpty<'_, Asked<'_>>) -> QueryBuilder<MySql> {
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT os.showtime_id, os.order_id, os.seat_no FROM order_seat os \
         WHERE os.active IS NOT NULL",
    );
    let showtimes: Vec<ShowtimeId> = lowering.iter().map(|(s, _)| *s).collect();
    if let Some(showtimes) = NonEmpty::of(&showtimes) {
        push_in(&mut q, "os.showtime_id", showtimes);
    }
    q
}

/// Rule 17: a row whose seat name is not the asked seat's, byte for byte,
/// but reads as it (`model::seat_names`: NFKC, case, invisible characters)
/// may hold it for the customer who reads it: the seat is not lowered, and
/// the row is reported.
fn hold_look_alikes(
    lowering: &[Asked<'_>],
    seats: &[(ShowtimeId, SeatNo, bool)],
    rows: &[sqlx::mysql::MySqlRow],
    out: &mut [SeatConfirmation],
    unknown: &mut Vec<UnknownRow>,
) {
    if rows.is_empty() {
        return;
    }
    let read: Vec<(usize, String)> = lowering
        .iter()
        .flat_map(|(_, idx)| idx.iter())
        .filter(|&&i| seats[i].2)
        .map(|&i| (i, read_as(&seats[i].1)))
        .collect();
    for r in rows {
        let (Ok(showtime), Ok(name)) = (int(r, "showtime_id"), text(r, "seat_no")) else {
            continue;
        };
        let mut as_read = None;
        for (i, asked) in &read {
            if seats[*i].0 != showtime || seats[*i].1 == name {
                continue;
            }
            if as_read.get_or_insert_with(|| read_as(&name)) == asked {
                out[*i].truth.unknown = true;
                unknown.push(contract::unknown_seat_row(
                    int(r, "order_id").unwrap_or_default(),
                    &name,
                    format!(
                        "seat_no {name:?} reads as the template's {:?} (Unicode NFKC, case, invisible characters): that seat is raised only, never lowered",
                        seats[*i].1
                    ),
                ));
            }
        }
    }
}

/// The rows of `q`, or none without a statement.
async fn fetch_if(
    pool: &sqlx::MySqlPool,
    q: Option<&mut QueryBuilder<MySql>>,
) -> sqlx::Result<Vec<sqlx::mysql::MySqlRow>> {
    match q {
        Some(q) => q.build().fetch_all(pool).await,
        None => Ok(Vec::new()),
    }
}

/// One row on an asked seat: its holding, its order (for the audit), and
/// its mark. `asked`: the seat's name when the row was found by it (a valid
/// occupancy must spell it so); None when it holds the seat only because
/// nobody can say which seat it holds (no seat number, no showtime): then
/// it is unknown whatever it says.
fn hold_row(
    entry: &mut SeatConfirmation,
    unknown: &mut Vec<UnknownRow>,
    facts: &SeatRowFacts,
    r: &sqlx::mysql::MySqlRow,
    asked: Option<&SeatNo>,
) {
    let mut reading = contract::read_seat_row(facts);
    match asked {
        Some(seat)
            if matches!(reading, SeatRow::Occupies(_)) && facts.seat_no.as_ref() != Ok(seat) =>
        {
            // A valid occupancy is spelled as the template spells the seat;
            // MySQL's comparison only found this one.
            reading = SeatRow::Unknown(format!(
                "seat_no {:?} is the template's {seat:?} only under the collation",
                facts.seat_no.as_deref().unwrap_or_default()
            ));
        }
        None if matches!(reading, SeatRow::Occupies(_)) => {
            reading = SeatRow::Unknown("its seat cannot be told from the others".into());
        }
        _ => {}
    }
    unknown.extend(reading.unknown_row(facts));
    let order_id = facts.order_id.as_ref().copied().unwrap_or_default();
    if let Some(holding) = reading.holding(order_id) {
        entry.truth.add(holding);
    }
    if let SeatRow::Occupies(status) = reading
        && (entry.order_id.is_none() || status == OrderStatus::Paid)
    {
        entry.order_id = Some(order_id);
    }
    // An order's time that does not decode counts as "just now": the grace
    // period can only start later (rule 4).
    let ms = match (&facts.order, order_dates(r)) {
        (None, _) => None,
        (Some(_), Ok(t)) => Some(t.and_utc().timestamp_millis()),
        (Some(_), Err(_)) => Some(i64::MAX),
    };
    entry.rows.mark.add(facts, ms);
    if let Some(ms) = ms {
        let last = &mut entry.rows.last_activity_ms;
        *last = Some(last.map_or(ms, |m: i64| m.max(ms)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The confirmation's and the seat names' statements with one seat:
    /// every `CASE` has its `WHEN`, every `FIELD` and `IN` its item.
    #[test]
    fn one_seat_builds_every_list_with_its_item() {
        let seats = [(5, "A-1".to_string(), true)];
        let idx = [0_usize];
        let asked = [(5, NonEmpty::of(&idx).unwrap())];
        let asked = NonEmpty::of(&asked).unwrap();
        let sql = confirm_query(asked, &seats, false, false)
            .sql()
            .as_str()
            .to_string();
        assert!(
            sql.contains("CASE os.showtime_id WHEN ? THEN FIELD(os.seat_no, ?) ELSE 0 END"),
            "{sql}"
        );
        assert!(
            sql.contains("(os.showtime_id = ? AND os.seat_no IN (?))"),
            "{sql}"
        );
        let sql = confirm_query(asked, &seats, true, false)
            .sql()
            .as_str()
            .to_string();
        assert!(sql.contains("mine.showtime_id IN (?)"), "{sql}");
        let sql = null_showtime_query(asked, &seats, NonEmpty::of(&idx).unwrap())
            .sql()
            .as_str()
            .to_string();
        assert!(sql.ends_with("os.seat_no IN (?)"), "{sql}");

        let candidates = ["A-1".to_string()];
        let asks = [SeatNameAsk {
            order_id: 7,
            seat_no: "a-1",
            candidates: &candidates,
        }];
        let part = [(0, NonEmpty::of(&candidates[..]).unwrap())];
        let sql = seats_named_query(&asks, NonEmpty::of(&part).unwrap())
            .sql()
            .as_str()
            .to_string();
        assert!(sql.contains("FIELD(os.seat_no, ?) AS pos"), "{sql}");
    }
}
