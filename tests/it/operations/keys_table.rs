//! ARCHITECTURE.md's table of the keys the reconciler owns is true: the
//! reconciler makes them as it runs (a run that repairs one showtime,
//! defers an orphan of another and stops at its scan limit; a daemon's pass
//! lease kept between passes and its data marker; a showtime lease taken by
//! the lease script), and every key found under
//! the test's prefix has a row whose pattern it matches, of its type, and
//! with an expiry exactly when the row says `PX`.

use std::time::Duration;

use regex::Regex;
use seatflow_reconciler::model::Kind;
use seatflow_test_support::docs::{code_spans, read, table_rows};
use seatflow_test_support::estate::{after_a_first_pass, estate};
use seatflow_test_support::servers::wait_until;

/// A row of the table: the patterns of its key column, as regular
/// expressions, and its type column.
struct Row {
    patterns: Vec<(String, Regex)>,
    kind: String,
    expires: bool,
}

/// `lock:{S}` → `^lock:\{-?\d+\}$`, `cursor:<job>:<I-of-N>`, `data-marker:{p<i>}`…
fn pattern(key: &str) -> Regex {
    let mut re = regex::escape(key);
    for (from, to) in [
        (r"\{S\}", r"\{-?\d+\}"),
        (r"\{I\-of\-N\}", r"\{\d+-of-\d+\}"),
        (r"<I\-of\-N>", r"\d+-of-\d+"),
        (r"\{p<i>\}", r"\{p\d+\}"),
        ("<job>", "[a-z_]+"),
        ("<instance>", ".+"),
    ] {
        re = re.replace(from, to);
    }
    Regex::new(&format!("^{re}$")).unwrap()
}

fn rows() -> Vec<Row> {
    let text = read("ARCHITECTURE.md");
    let rows = table_rows(&text, "| key | type | holds | wrong type |");
    assert!(rows.len() >= 10, "the keys table: {rows:?}");
    rows.into_iter()
        .map(|cells| {
            let (kind, expiry) = cells[1]
                .split_once(", ")
                .map_or((cells[1].as_str(), ""), |(k, e)| (k, e));
            assert!(
                matches!(expiry, "" | "PX" | "no expiry"),
                "{}: an expiry of {expiry:?}",
                cells[0]
            );
            Row {
                patterns: code_spans(&cells[0])
                    .into_iter()
                    .map(|k| (k.clone(), pattern(&k)))
                    .collect(),
                kind: kind.to_string(),
                expires: expiry == "PX",
            }
        })
        .collect()
}

#[tokio::test]
async fn each_key_the_reconciler_writes_has_the_type_and_expiry_its_row_says() {
    let env = estate(None, 3, |s| {
        s.reconcile.orphan_grace = Duration::from_secs(3600);
        // Two of the three showtimes a run: the rest waits at the cursor.
        for kind in Kind::ALL.into_iter().filter(|k| k.is_seat_job()) {
            s.job_mut(kind).scan_limit = 2;
        }
    })
    .await;
    // Showtime 1: an orphan lock, deferred by its grace (a suspect record).
    // Showtime 2: a sold seat shown free, repaired (its done record).
    env.fx.warm(1, &[("A-1", "1")]).await.unwrap();
    env.fx.order(2, "PAID", &["A-2"], 600).await.unwrap();
    let report = env.once(&Kind::ALL).await;
    assert_eq!(report.total_fixed(), 1, "{}", report.to_text());
    // The daemon: its pass lease kept after its first pass, its data marker.
    let daemon = after_a_first_pass(&env).await;
    let ours = format!("{}reconcile:", env.prefix);
    let data_marker = format!("{ours}data-marker");
    wait_until(
        "the data marker is written",
        Duration::from_secs(30),
        || async {
            env.redis::<i64>(redis::cmd("EXISTS").arg(&data_marker))
                .await
                == 1
        },
    )
    .await;
    // A showtime lease, as a repair takes it (its script).
    env.ctx
        .redis
        .acquire_leases("token", &[9], 60_000)
        .await
        .unwrap();

    let keys: Vec<String> = env.redis(redis::cmd("KEYS").arg(format!("{ours}*"))).await;
    let rows = rows();
    let mut seen = std::collections::BTreeSet::new();
    for key in &keys {
        let name = &key[ours.len()..];
        let matching: Vec<&Row> = rows
            .iter()
            .filter(|r| r.patterns.iter().any(|(_, p)| p.is_match(name)))
            .collect();
        let [row] = matching.as_slice() else {
            panic!("{name}: {} rows of the keys table match it", matching.len());
        };
        let kind: String = env.redis(redis::cmd("TYPE").arg(key)).await;
        let pttl: i64 = env.redis(redis::cmd("PTTL").arg(key)).await;
        assert_eq!(kind, row.kind, "{name}'s type");
        assert_eq!(pttl > 0, row.expires, "{name} expires in {pttl} ms");
        seen.extend(row.patterns.first().map(|(k, _)| k.clone()));
    }
    // What this daemon makes; the rest exist only inside one script
    // (`writing:{S}`, the events probe), only with the binlog on
    // (`binlog:{I-of-N}`), or only when MySQL refuses the audit.
    for made in [
        "lock:{S}",
        "suspect:{S}",
        "done:{S}",
        "cursor:<job>",
        "pass:{I-of-N}",
        "pass-done:{I-of-N}",
        "data-marker",
    ] {
        assert!(seen.contains(made), "no {made} key among {keys:?}");
    }
    daemon.stop().await;
}
