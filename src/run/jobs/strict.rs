//! The strict reading applied to a run (rules 12, 15, 16): rows the
//! contract does not explain are reported once per run, by one job, and a
//! chunk's occupancy names every seat the way the template spells it, with
//! MySQL's own comparison deciding which seat a row names.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::error::Error;
use crate::model::contract::{self, UnknownRow};
use crate::model::seat_names::ReadNames;
use crate::model::{Holding, OccupancyBuilder, ShowtimeId, Template};
use crate::store::mysql::{OccupancyRead, SeatNameAsk, ShowtimeRow};

use super::report::JobReport;
use crate::repeats::{PROBLEM_EVERY, Repeats};
use crate::run::context::Context;

/// The problems a run has reported, shared by its jobs: each one (an unknown
/// row, a seat key of the wrong type) is counted and logged once per run,
/// by the first job that meets it.
#[derive(Debug, Clone, Default)]
pub struct Reported(Arc<Mutex<HashSet<String>>>);

impl Reported {
    /// True the first time `key` is reported in this run.
    pub fn first(&self, key: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string())
    }
}

/// Most unknown rows logged one by one per job run; the rest are counted
/// and summarised in one line.
const MAX_LINES: usize = 20;

/// Reports unknown rows for one job: counted as `invalid_data` and logged
/// with table, id and reason, once per run (shared through [`Reported`]).
pub struct UnknownRows {
    reported: Reported,
    /// A row that stays is logged once an hour.
    repeats: Repeats,
    logged: usize,
    more: u64,
}

impl UnknownRows {
    pub fn new(reported: Reported, repeats: Repeats) -> UnknownRows {
        UnknownRows {
            reported,
            repeats,
            logged: 0,
            more: 0,
        }
    }

    pub fn report(&mut self, report: &mut JobReport, rows: &[UnknownRow]) {
        for row in rows {
            if !self.reported.first(&row.key()) {
                continue;
            }
            report.invalid();
            if self.logged >= MAX_LINES {
                self.more += 1;
            } else if let Some(unlogged) = self.repeats.sighting(&row.key(), PROBLEM_EVERY) {
                self.logged += 1;
                tracing::warn!(
                    table = row.table,
                    row = %row.id,
                    why = %row.why,
                    seen_since_last_line = unlogged,
                    "row outside the contract: its seats are never lowered, its order never cancelled on a guess (rule 15)"
                );
            }
        }
    }

    pub fn summarise(&self) {
        if self.more > 0 {
            tracing::warn!(
                rows = self.more,
                logged = self.logged,
                "more rows outside the contract than logged one by one"
            );
        }
    }
}

/// How a row that is no template seat byte for byte was given a seat.
#[derive(Debug, Clone, Copy)]
enum Named {
    /// MySQL's comparison of `order_seat.seat_no` (its collation).
    ByCollation,
    /// As a person reads it (`model::seat_names`), where MySQL names none.
    AsRead,
}

/// Names every row of a chunk's occupancy by the template's spelling of the
/// seat it holds. A row whose seat number is an enabled template seat byte
/// for byte is kept as read. Any other row is asked of MySQL (one query,
/// only when there are such rows): the template seat its column's collation
/// takes it for holds it as an unknown row (a valid occupancy spelled
/// otherwise is not one by the contract: it is reported, and blocks
/// lowering that seat); a row MySQL names no seat for, but whose name reads
/// as a template seat's (`model::seat_names`: NFKC, case, invisible
/// characters), holds that seat the same way; a row that names no enabled
/// seat either way holds nothing here.
pub async fn name_seats(
    ctx: &Context,
    page: &[ShowtimeRow],
    templates: &HashMap<i64, Arc<Template>>,
    read: OccupancyRead,
) -> Result<OccupancyRead, Error> {
    let OccupancyRead {
        occupancy,
        mut unknown,
    } = read;
    let template_of: HashMap<ShowtimeId, &Arc<Template>> = page
        .iter()
        .filter_map(|s| templates.get(&s.hall_id).map(|t| (s.id, t)))
        .collect();
    let in_template = |showtime: ShowtimeId, seat: &str| {
        template_of
            .get(&showtime)
            .is_some_and(|t| t.find(seat.as_bytes()).is_some())
    };
    let strays: Vec<(ShowtimeId, &str, Holding, i64)> = occupancy
        .iter()
        .filter(|(s, seat, _, _)| !in_template(*s, seat))
        .collect();
    if strays.is_empty() {
        return Ok(OccupancyRead { occupancy, unknown });
    }
    let asks: Vec<SeatNameAsk<'_>> = strays
        .iter()
        .map(|(showtime, seat, _, order_id)| SeatNameAsk {
            order_id: *order_id,
            seat_no: seat,
            candidates: template_of
                .get(showtime)
                .map(|t| t.seats())
                .unwrap_or_default(),
        })
        .collect();
    let named = ctx
        .retry("name seats", || ctx.mysql.seats_named(&asks))
        .await?;
    let mut out = OccupancyBuilder::default();
    for &showtime in occupancy.any_seat() {
        out.push_any_seat(showtime);
    }
    for (showtime, seat, holding, order_id) in occupancy.iter() {
        if in_template(showtime, seat) {
            out.push_row(showtime, seat, holding, order_id);
        }
    }
    // Template seats by how a person reads them, per showtime, built only
    // for a row MySQL's comparison names no seat for (rule 17).
    let mut read_names: HashMap<ShowtimeId, ReadNames> = HashMap::new();
    for ((showtime, seat, holding, order_id), name) in strays.iter().zip(named) {
        let (seats, how) = match (name, template_of.get(showtime)) {
            (Some(name), _) => (vec![name], Named::ByCollation),
            (None, Some(template)) => (
                read_names
                    .entry(*showtime)
                    .or_insert_with(|| ReadNames::of(template.seats()))
                    .seats_read_as(seat)
                    .to_vec(),
                Named::AsRead,
            ),
            (None, None) => (Vec::new(), Named::AsRead),
        };
        if let Holding::Valid(_) = holding {
            let why = match (seats.as_slice(), how) {
                ([], _) => format!(
                    "seat_no {} is no enabled seat of showtime {showtime}'s hall",
                    crate::plan::shown(seat)
                ),
                (named, Named::ByCollation) => format!(
                    "seat_no {} is the template's {} only under the collation",
                    crate::plan::shown(seat),
                    crate::plan::shown(&named[0])
                ),
                (named, Named::AsRead) => format!(
                    "seat_no {} reads as the template's {} (Unicode NFKC, case, invisible characters): that seat is raised only, never lowered",
                    crate::plan::shown(seat),
                    named
                        .iter()
                        .map(|n| crate::plan::shown(n))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            };
            unknown.push(contract::unknown_seat_row(*order_id, seat, why));
        }
        for name in &seats {
            out.push_row(
                *showtime,
                name,
                Holding::Unknown {
                    order_id: *order_id,
                },
                *order_id,
            );
        }
    }
    Ok(OccupancyRead {
        occupancy: out.finish(),
        unknown,
    })
}
