//! One showtime as `inspect` shows it: the showtime, its hall's layout, and
//! the rows that may hold its seats.

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::contract::{self, SeatRow, UnknownRow};
use crate::model::{SeatNo, ShowtimeId};
use chrono::NaiveDateTime;
use sqlx::{MySql, QueryBuilder, Row};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShowtimeInfo {
    pub id: ShowtimeId,
    pub hall_id: i64,
    /// None when the stored value does not decode (`starts_at_raw` shows it).
    pub starts_at: Option<NaiveDateTime>,
    pub starts_at_raw: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutSeat {
    pub seat_no: SeatNo,
    pub row_label: Option<String>,
    pub col_no: Option<i32>,
    pub enabled: bool,
}

/// An `order_seat` row of a showtime that may hold its seat, for `inspect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupant {
    /// None: NULL (the row may hold any seat of the showtime).
    pub seat_no: Option<SeatNo>,
    /// None: NULL.
    pub order_id: Option<i64>,
    pub order_no: String,
    /// `Occupies` or `Unknown` (ended rows are not listed).
    pub reading: SeatRow,
    /// The row as reported when it is outside the contract.
    pub unknown: Option<UnknownRow>,
    pub expires_at: Option<NaiveDateTime>,
}

impl MysqlStore {
    /// One showtime, whatever its status (for `inspect`).
    pub async fn showtime(&self, id: ShowtimeId) -> Result<Option<ShowtimeInfo>> {
        let row = sqlx::query(
            "SELECT id, hall_id, starts_at, CAST(starts_at AS CHAR) AS starts_raw, \
             CAST(status AS BINARY) AS status FROM showtime WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(ShowtimeInfo {
                id: r.try_get("id")?,
                hall_id: int(&r, "hall_id").unwrap_or_default(),
                starts_at: datetime(&r, "starts_at").ok().flatten(),
                starts_at_raw: lossy(&r, "starts_raw"),
                status: lossy(&r, "status"),
            })
        })
        .transpose()
    }

    /// Every template seat of a hall with its position, enabled or not
    /// (`enabled` other than 0 or 1 reads as not enabled).
    pub async fn layout(&self, hall_id: i64) -> Result<Vec<LayoutSeat>> {
        // A column the schema lacks is shown empty (rule 17: it holds no job).
        let shape = self.contract().shape.clone();
        let or_null = |c: &str| match shape.has("hall_seat", c) {
            true => c.to_string(),
            false => format!("NULL AS {c}"),
        };
        let sql = format!(
            "SELECT seat_no, {}, {}, CAST(enabled AS SIGNED) AS enabled FROM hall_seat \
             WHERE hall_id = ? ORDER BY {}",
            or_null("row_label"),
            or_null("col_no"),
            shape.seat_order(""),
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(hall_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .filter(|r| !is_null(r, "seat_no"))
            .map(|r| LayoutSeat {
                seat_no: lossy(r, "seat_no"),
                row_label: r.try_get("row_label").ok().flatten(),
                col_no: r.try_get("col_no").ok().flatten(),
                enabled: contract::read_enabled(&column(r, "enabled")) == Ok(true),
            })
            .collect())
    }

    /// The rows of a showtime that may hold its seats, with their orders'
    /// details, read strictly: valid occupancies and rows outside the
    /// contract (ended rows are left out).
    pub async fn occupants(&self, showtime: ShowtimeId) -> Result<Vec<Occupant>> {
        let mut q = QueryBuilder::<MySql>::new(SEAT_ROW_COLUMNS);
        q.push(if self.contract().shape.has("ticket_order", "order_no") {
            ", o.order_no"
        } else {
            ", NULL AS order_no"
        })
        .push(
            " FROM order_seat os \
                 LEFT JOIN ticket_order o ON o.id = os.order_id WHERE os.showtime_id = ",
        )
        .push_bind(showtime)
        .push(" ORDER BY os.seat_no, os.order_id");
        let rows = q.build().fetch_all(&self.pool).await?;
        let mut out = Vec::new();
        for r in &rows {
            let facts = seat_row_facts(r);
            let reading = contract::read_seat_row(&facts);
            if reading == SeatRow::Ended {
                continue;
            }
            out.push(Occupant {
                order_no: lossy(r, "order_no"),
                expires_at: datetime(r, "o_expires_at").ok().flatten(),
                unknown: reading.unknown_row(&facts),
                seat_no: facts.seat_no.ok(),
                order_id: facts.order_id.ok(),
                reading,
            });
        }
        Ok(out)
    }
}
