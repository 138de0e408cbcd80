//! Writes seatflow-shaped data the way the application would (hall
//! templates, showtimes, orders, warmed seat hashes). Used by the demo, the
//! tests and the benchmark. These are the *application's* writes, so they
//! are plain commands; the reconciler's own writes never are.

use std::collections::HashMap;

use crate::store::redis::RedisConn;
use sqlx::mysql::MySqlPool;

use crate::model::{SeatNo, ShowtimeId};
use crate::store::redis::Keys;

pub struct Fixtures {
    pub pool: MySqlPool,
    pub redis: RedisConn,
    pub keys: Keys,
}

pub type AnyResult<T> = anyhow::Result<T>;

impl Fixtures {
    /// A hall with `rows` × `cols` enabled seats named `A-1`, `A-2`, …
    pub async fn hall(&self, id: i64, rows: usize, cols: usize) -> AnyResult<Vec<SeatNo>> {
        sqlx::query("INSERT INTO hall (id, name) VALUES (?, ?)")
            .bind(id)
            .bind(format!("Hall {id}"))
            .execute(&self.pool)
            .await?;
        let mut seats = Vec::with_capacity(rows * cols);
        let mut q = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "INSERT INTO hall_seat (hall_id, seat_no, row_label, col_no, enabled) ",
        );
        let mut tuples = Vec::new();
        for r in 0..rows {
            let label = row_label(r);
            for c in 1..=cols {
                let seat = format!("{label}-{c}");
                seats.push(seat.clone());
                tuples.push((seat, label.clone(), c as i32));
            }
        }
        if tuples.is_empty() {
            return Ok(seats);
        }
        q.push_values(&tuples, |mut b, (seat, label, col)| {
            b.push_bind(id)
                .push_bind(seat)
                .push_bind(label)
                .push_bind(*col)
                .push_bind(true);
        });
        q.build().execute(&self.pool).await?;
        Ok(seats)
    }
    /// A showtime starting `starts_in_min` minutes from now.
    pub async fn showtime(
        &self,
        id: ShowtimeId,
        hall: i64,
        starts_in_min: i64,
        status: &str,
    ) -> AnyResult<()> {
        sqlx::query(
            "INSERT INTO showtime (id, movie_id, hall_id, starts_at, status) \
             VALUES (?, 1, ?, UTC_TIMESTAMP(3) + INTERVAL ? MINUTE, ?)",
        )
        .bind(id)
        .bind(hall)
        .bind(starts_in_min)
        .bind(status)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
    /// An order with its seats, created (and paid, if PAID or REFUNDED) a
    /// minute ago. `active` follows the contract: 1 for PENDING/PAID, NULL
    /// for CANCELLED/REFUNDED. `expires_in_s` may be negative.
    pub async fn order(
        &self,
        showtime: ShowtimeId,
        status: &str,
        seats: &[&str],
        expires_in_s: i64,
    ) -> AnyResult<i64> {
        let mut tx = self.pool.begin().await?;
        let no = format!("O-{}", uuid::Uuid::new_v4().simple());
        let id = sqlx::query(
            "INSERT INTO ticket_order (order_no, user_id, showtime_id, status, expires_at, created_at, paid_at) \
             VALUES (?, 7, ?, ?, UTC_TIMESTAMP(3) + INTERVAL ? SECOND, UTC_TIMESTAMP(3) - INTERVAL 1 MINUTE, \
             IF(? IN ('PAID', 'REFUNDED'), UTC_TIMESTAMP(3) - INTERVAL 1 MINUTE, NULL))",
        )
        .bind(&no)
        .bind(showtime)
        .bind(status)
        .bind(expires_in_s)
        .bind(status)
        .execute(&mut *tx)
        .await?
        .last_insert_id() as i64;
        let active = matches!(status, "PENDING" | "PAID").then_some(1i8);
        for seat in seats {
            sqlx::query("INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES (?, ?, ?, ?)")
                .bind(id)
                .bind(showtime)
                .bind(*seat)
                .bind(active)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(id)
    }
    /// Warms a seat hash with explicit values (the app's "open sales").
    pub async fn warm(&self, showtime: ShowtimeId, values: &[(&str, &str)]) -> AnyResult<()> {
        let mut c = self.redis.clone();
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.keys.seat(showtime));
        for (k, v) in values {
            cmd.arg(*k).arg(*v);
        }
        cmd.query_async::<()>(&mut c).await?;
        Ok(())
    }

    /// Warms every seat to `"0"`, then applies `overrides`.
    pub async fn warm_all(
        &self,
        showtime: ShowtimeId,
        seats: &[SeatNo],
        overrides: &[(&str, &str)],
    ) -> AnyResult<()> {
        let mut values: Vec<(&str, &str)> = seats.iter().map(|s| (s.as_str(), "0")).collect();
        values.extend_from_slice(overrides);
        self.warm(showtime, &values).await
    }
    pub async fn seat_value(&self, showtime: ShowtimeId, seat: &str) -> AnyResult<Option<String>> {
        let mut c = self.redis.clone();
        Ok(redis::cmd("HGET")
            .arg(self.keys.seat(showtime))
            .arg(seat)
            .query_async(&mut c)
            .await?)
    }
    pub async fn hash(&self, showtime: ShowtimeId) -> AnyResult<HashMap<String, String>> {
        let mut c = self.redis.clone();
        Ok(redis::cmd("HGETALL")
            .arg(self.keys.seat(showtime))
            .query_async(&mut c)
            .await?)
    }
    pub async fn order_status(&self, order_id: i64) -> AnyResult<String> {
        Ok(
            sqlx::query_scalar("SELECT status FROM ticket_order WHERE id = ?")
                .bind(order_id)
                .fetch_one(&self.pool)
                .await?,
        )
    }
    /// Deletes every key under the prefix.
    pub async fn delete_prefix(&self) -> AnyResult<()> {
        delete_prefix(&self.redis, self.keys.prefix()).await
    }
}

/// Deletes every key under `prefix`: SCAN (never KEYS) and UNLINK (freed in
/// the background, so a 3 GB estate does not block Redis).
pub async fn delete_prefix<C>(redis: &C, prefix: &str) -> AnyResult<()>
where
    C: redis::aio::ConnectionLike + Clone,
{
    let mut c = redis.clone();
    let pattern = format!("{prefix}*");
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(10_000)
            .query_async(&mut c)
            .await?;
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(&mut c)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// `A`…`Z`, then `AA`, `AB`, …
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "ASCII letters built here"
)]
pub fn row_label(mut r: usize) -> String {
    let mut s = Vec::new();
    loop {
        s.push(b'A' + (r % 26) as u8);
        if r < 26 {
            break;
        }
        r = r / 26 - 1;
    }
    s.reverse();
    String::from_utf8(s).expect("ascii")
}

/// Replaces the database of a MySQL URL (keeps credentials and options).
pub fn with_database(url: &str, db: &str) -> AnyResult<String> {
    let mut u = url::Url::parse(url)?;
    u.set_path(&format!("/{db}"));
    Ok(u.to_string())
}

/// One connection to the server of `url`, with no database selected, for
/// creating or dropping `db` (whose name is checked: it goes into SQL as is).
pub async fn server_pool(url: &str, db: &str) -> AnyResult<sqlx::MySqlPool> {
    anyhow::ensure!(
        db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database name {db:?} must be [A-Za-z0-9_]"
    );
    let mut server = url::Url::parse(url)?;
    server.set_path("/");
    Ok(sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(server.as_str())
        .await?)
}

/// Drops and creates `db` on the server of `url`.
pub async fn recreate_database(url: &str, db: &str) -> AnyResult<()> {
    let sql =
        format!("DROP DATABASE IF EXISTS `{db}`; CREATE DATABASE `{db}` CHARACTER SET utf8mb4");
    on_server(url, db, sql).await
}

/// Creates `db` on the server of `url` unless it exists.
pub async fn create_database(url: &str, db: &str) -> AnyResult<()> {
    let sql = format!("CREATE DATABASE IF NOT EXISTS `{db}` CHARACTER SET utf8mb4");
    on_server(url, db, sql).await
}

/// Runs `sql` (about `db`) on the server of `url`, with no database selected.
async fn on_server(url: &str, db: &str, sql: String) -> AnyResult<()> {
    let pool = server_pool(url, db).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&pool)
        .await?;
    pool.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn row_labels() {
        let got: Vec<_> = [0, 1, 25, 26, 27, 701]
            .iter()
            .map(|&r| super::row_label(r))
            .collect();
        assert_eq!(got, vec!["A", "B", "Z", "AA", "AB", "ZZ"]);
    }
}
