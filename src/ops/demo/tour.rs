//! The demo's tour: seeds every kind of drift plus one in-flight hold,
//! shows the drift, repairs it, and shows that a second pass fixes nothing.

use std::time::Duration;

use anyhow::Context as _;

use crate::config::Settings;
use crate::model::Kind;
use crate::ops::demo::fixtures::Fixtures;
use crate::run::context::Context;
use crate::run::jobs::report::RunReport;
use crate::run::jobs::{RunOptions, RunRequest};

use super::GRACE;

/// Seeds the drift, repairs it and shows the result, on the database and
/// prefix `settings` name (prepared by the caller).
pub(super) async fn run(settings: Settings) -> anyhow::Result<()> {
    let ctx = Context::connect(settings)
        .await
        .context("connecting (are MariaDB and Redis running?)")?;
    ctx.mysql.migrate(true).await?;
    let fx = Fixtures {
        pool: ctx.mysql.pool().clone(),
        redis: ctx.redis.connection(),
        keys: ctx.redis.keys.clone(),
    };
    fx.delete_prefix().await?;

    // Hall 1: rows A–C × 8 seats. Showtime 101 has a warmed hash with drift
    // of every seat-level kind; 102 is ON_SALE but its hash was lost.
    let seats = fx.hall(1, 3, 8).await?;
    fx.showtime(101, 1, 90, "ON_SALE").await?;
    fx.showtime(102, 1, 180, "ON_SALE").await?;
    fx.showtime(103, 1, 600, "CLOSED").await?;
    fx.order(101, "PAID", &["A-1", "A-2"], -600).await?; // consistent
    fx.order(101, "PAID", &["A-3"], -600).await?; // paid, Redis still "1"
    fx.order(101, "REFUNDED", &["B-2"], -600).await?; // refunded, Redis still "2"
    fx.order(101, "PENDING", &["B-3"], 600).await?; // held, Redis says "2"
    let expired = fx.order(101, "PENDING", &["C-1", "C-2"], -600).await?; // never expired
    fx.order(102, "PAID", &["A-4"], -600).await?;
    fx.order(102, "PENDING", &["A-5"], 600).await?;
    fx.warm_all(
        101,
        &seats,
        &[
            ("A-1", "2"),
            ("A-2", "2"),
            ("A-3", "1"),
            ("B-1", "1"),
            ("B-2", "2"),
            ("B-3", "2"),
            ("C-1", "1"),
            ("C-2", "1"),
            ("C-5", "1"), // a customer's hold whose order is being written right now
        ],
    )
    .await?;
    crate::outln!(
        "\nSeeded: PAID A-3 shown as held, B-1 locked with no order, refunded B-2 still sold,"
    );
    crate::outln!(
        "held B-3 shown as sold, an order for C-1/C-2 15 min past its deadline, showtime 102's"
    );
    crate::outln!("hash missing, and C-5 held by a customer whose order is not committed yet.\n");
    print_map(&ctx, &fx, 101).await?;

    let all = Kind::ALL;
    crate::outln!("\n-- 1. dry run: what is wrong (nothing written) --");
    let dry = run_jobs(&ctx, &all, true).await;
    crate::out!("{}", dry.to_text());

    crate::outln!(
        "\n-- 2. repair: orphans are only suspects until seen for {GRACE:?} (grace period) --"
    );
    let first = run_jobs(&ctx, &all, false).await;
    crate::out!("{}", first.to_text());
    anyhow::ensure!(
        fx.order_status(expired).await? == "CANCELLED",
        "expired order was not cancelled"
    );

    crate::outln!("\n-- the customer's order for C-5 commits; the grace period passes --");
    fx.order(101, "PENDING", &["C-5"], 900).await?;
    tokio::time::sleep(GRACE + Duration::from_millis(500)).await;

    crate::outln!(
        "\n-- 3. repair again: orphans seen past the grace period are released; C-5 is kept --"
    );
    let second = run_jobs(&ctx, &all, false).await;
    crate::out!("{}", second.to_text());

    crate::outln!("\n-- 4. once more: a converged state needs nothing --");
    let third = run_jobs(&ctx, &all, false).await;
    crate::out!("{}", third.to_text());
    print_map(&ctx, &fx, 101).await?;

    let drift = crate::ops::inspect::differences(&ctx).await?;
    anyhow::ensure!(drift.is_empty(), "seats still differ from MySQL: {drift:?}");
    anyhow::ensure!(third.total_fixed() == 0, "the last pass should fix nothing");
    anyhow::ensure!(
        fx.seat_value(101, "C-5").await?.as_deref() == Some("1"),
        "in-flight hold was harmed"
    );
    crate::outln!("\nConverged: every seat of every ON_SALE showtime equals what MySQL implies.");
    Ok(())
}

/// A small seat map: Redis value, and `*` where it differs from MySQL.
async fn print_map(ctx: &Context, fx: &Fixtures, showtime: i64) -> anyhow::Result<()> {
    let hash = fx.hash(showtime).await?;
    let occupancy = ctx.mysql.occupancy(&[showtime]).await?.occupancy;
    let occ = occupancy.of(showtime);
    crate::outln!(
        "showtime {showtime} seat map (0 free, 1 locked, 2 sold; * = Redis disagrees with MySQL):"
    );
    for row in ["A", "B", "C"] {
        let mut line = format!("  {row} ");
        for col in 1..=8 {
            let seat = format!("{row}-{col}");
            let value = hash.get(&seat).map(String::as_str).unwrap_or("?");
            let truth = occ.get(&seat);
            let expected = if truth.unknown {
                "?"
            } else {
                truth.expected().as_redis()
            };
            let mark = if value == expected { ' ' } else { '*' };
            line.push_str(&format!(" {value}{mark}"));
        }
        crate::outln!("{line}");
    }
    Ok(())
}

/// A run of `kinds` as the tour shows it, outside any pass.
async fn run_jobs(ctx: &Context, kinds: &[Kind], dry_run: bool) -> RunReport {
    let opts = RunOptions {
        dry_run,
        ..RunOptions::default()
    };
    crate::run::jobs::run(ctx, RunRequest::direct(ctx, kinds, opts))
        .await
        .report
}
