//! What SREs look at, checked against the real binary and real tools:
//!
//! * every metric name used by the Grafana dashboard and the alert rules is
//!   one the running daemon exports (queries parsed, compared with a scrape);
//! * a real Prometheus (Debian package `prometheus`) scrapes the daemon and
//!   loads `deploy/prometheus/alerts.yaml`: after drift is injected and
//!   repaired, every dashboard query runs without error and returns data, and
//!   a repair spike makes `SeatflowReconcilerRepairSpike` pending/firing;
//! * a real Pushgateway (Debian package `prometheus-pushgateway`) receives a
//!   `once --pushgateway URL` run's metrics under `job="seatflow-reconciler"`
//!   with no `instance`.
//!
//! Every process started here is killed when its guard drops; everything
//! listens on 127.0.0.1 only; every wait is bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use seatflow_test_support::daemon::{Daemon, daemon_command, free_port, sample};
use seatflow_test_support::servers::{self, PrivateServer, TempDir, wait_until, with_log};
use seatflow_test_support::{DbUser, TestEnv};
use serde_json::Value;

// ---------------------------------------------------------------------------
// The files under test

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn alerts_path() -> PathBuf {
    repo().join("deploy/prometheus/alerts.yaml")
}

fn cronjob_alerts_path() -> PathBuf {
    repo().join("deploy/prometheus/alerts-cronjob.yaml")
}

fn dashboard_paths() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(repo().join("dashboards"))
        .expect("dashboards/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    out.sort();
    assert!(
        out.iter().any(|p| p.ends_with("seatflow-reconciler.json")),
        "dashboards/seatflow-reconciler.json is missing"
    );
    out
}

/// One PromQL query of a dashboard: where it is and the raw expression (with
/// Grafana's variables). Every one of them must return data once drift has
/// been repaired.
#[derive(Debug, Clone)]
struct DashboardQuery {
    at: String,
    expr: String,
    /// A `label_values(...)` template variable (its inner selector as `expr`).
    variable: bool,
}

fn dashboard_queries(path: &Path) -> Vec<DashboardQuery> {
    let text = std::fs::read_to_string(path).unwrap();
    let d: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let mut out = Vec::new();
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let q = v["query"]
            .as_str()
            .or_else(|| v["query"]["query"].as_str())
            .unwrap_or_default();
        let inner = q
            .trim()
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| r.rsplit_once(','))
            .map(|(sel, _label)| sel.trim().to_string())
            .unwrap_or_else(|| panic!("{name}: variable {}: unsupported query {q:?}", v["name"]));
        out.push(DashboardQuery {
            at: format!("{name} variable ${}", v["name"].as_str().unwrap_or("?")),
            expr: inner,
            variable: true,
        });
    }
    fn walk(panels: &Value, name: &str, out: &mut Vec<DashboardQuery>) {
        for p in panels.as_array().into_iter().flatten() {
            walk(&p["panels"], name, out);
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push(DashboardQuery {
                        at: format!(
                            "{name} panel {:?} [{}]",
                            p["title"].as_str().unwrap_or("?"),
                            t["refId"].as_str().unwrap_or("?")
                        ),
                        expr: expr.to_string(),
                        variable: false,
                    });
                }
            }
        }
    }
    walk(&d["panels"], &name, &mut out);
    out
}

fn all_dashboard_queries() -> Vec<DashboardQuery> {
    let out: Vec<DashboardQuery> = dashboard_paths()
        .iter()
        .flat_map(|p| dashboard_queries(p))
        .collect();
    assert!(
        out.len() >= 10,
        "suspiciously few dashboard queries: {out:?}"
    );
    out
}

/// Grafana's variables, substituted the way Grafana would for a Prometheus
/// that scrapes every second: "All" is `.*`, rates over a 30 s window.
fn grafana_subst(expr: &str) -> String {
    let mut e = expr.to_string();
    for (var, value) in [
        ("$__rate_interval", "30s"),
        ("${__rate_interval}", "30s"),
        ("$__interval", "5s"),
        ("${__interval}", "5s"),
        ("$__range", "5m"),
        ("${__range}", "5m"),
        ("${namespace}", ".*"),
        ("$namespace", ".*"),
        ("${instance}", ".*"),
        ("$instance", ".*"),
    ] {
        e = e.replace(var, value);
    }
    assert!(!e.contains('$'), "unknown Grafana variable left in {e:?}");
    e
}

/// The `expr:` of every rule in a rule file, and the number of rules. A small
/// reader for the shapes rule files use (`expr: inline`, `expr: "quoted"`,
/// block scalars `|`/`>`); the caller checks one expr per rule, so a shape it
/// does not understand fails the test instead of being skipped.
fn rule_exprs(yaml: &str) -> (Vec<String>, usize) {
    let indent_of = |l: &str| l.len() - l.trim_start().len();
    let lines: Vec<&str> = yaml.lines().collect();
    let rules = lines
        .iter()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("- alert:") || t.starts_with("- record:")
        })
        .count();
    let mut out = Vec::new();
    let mut k = 0;
    while k < lines.len() {
        let line = lines[k];
        let t = line.trim_start().trim_start_matches("- ");
        k += 1;
        let Some(rest) = t.strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest.starts_with('|') || rest.starts_with('>') {
            let indent = indent_of(line);
            let mut body = Vec::new();
            while k < lines.len() && (lines[k].trim().is_empty() || indent_of(lines[k]) > indent) {
                body.push(lines[k].trim());
                k += 1;
            }
            out.push(body.join("\n"));
        } else if let Some(q) = rest.strip_prefix('"').and_then(|r| r.rsplit_once('"')) {
            out.push(q.0.replace("\\\"", "\"").replace("\\\\", "\\"));
        } else if let Some(q) = rest.strip_prefix('\'').and_then(|r| r.rsplit_once('\'')) {
            out.push(q.0.replace("''", "'"));
        } else {
            // A plain scalar ends at " #" (a YAML comment).
            out.push(rest.split(" #").next().unwrap().trim().to_string());
        }
    }
    (out, rules)
}

fn alert_names(yaml: &str) -> BTreeSet<String> {
    yaml.lines()
        .filter_map(|l| l.trim_start().strip_prefix("- alert:"))
        .map(|n| n.trim().trim_matches(['\'', '"']).to_string())
        .collect()
}

// ---------------------------------------------------------------------------
// PromQL: the metric names an expression selects

/// PromQL functions (Prometheus 2.x and 3.x), aggregation operators and
/// keywords: identifiers that are never metric names.
const PROMQL_WORDS: &[&str] = &[
    // functions
    "abs",
    "absent",
    "absent_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "cos",
    "cosh",
    "count_over_time",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "deg",
    "delta",
    "deriv",
    "double_exponential_smoothing",
    "exp",
    "floor",
    "histogram_avg",
    "histogram_count",
    "histogram_fraction",
    "histogram_quantile",
    "histogram_stddev",
    "histogram_stdvar",
    "histogram_sum",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "info",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "mad_over_time",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "pi",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rad",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sin",
    "sinh",
    "sort",
    "sort_by_label",
    "sort_by_label_desc",
    "sort_desc",
    "sqrt",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "tan",
    "tanh",
    "time",
    "timestamp",
    "vector",
    "year",
    // aggregation operators
    "avg",
    "bottomk",
    "count",
    "count_values",
    "group",
    "limit_ratio",
    "limitk",
    "max",
    "min",
    "quantile",
    "stddev",
    "stdvar",
    "sum",
    "topk",
    // keywords and literals
    "and",
    "or",
    "unless",
    "atan2",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "start",
    "end",
    "inf",
    "nan",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LIST_WORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Index just past the string literal starting at `i` (quote at `b[i]`).
fn skip_string(b: &[u8], mut i: usize) -> usize {
    let quote = b[i];
    i += 1;
    while i < b.len() && b[i] != quote {
        if b[i] == b'\\' && quote != b'`' {
            i += 1;
        }
        i += 1;
    }
    i + 1
}

/// Index just past the `close` matching the opener at `b[i]`, skipping strings.
fn skip_group(b: &[u8], mut i: usize, close: u8) -> usize {
    i += 1;
    while i < b.len() && b[i] != close {
        if matches!(b[i], b'"' | b'\'' | b'`') {
            i = skip_string(b, i);
        } else {
            i += 1;
        }
    }
    i + 1
}

/// The metric names an expression selects: identifiers outside strings,
/// label matchers (`{...}`), ranges and durations (`[...]`), label lists
/// (`by (...)`, `on (...)`, …) and comments, that are neither a PromQL word
/// nor followed by `(` (a function call).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if matches!(c, b'"' | b'\'' | b'`') {
            i = skip_string(b, i);
        } else if c == b'{' {
            i = skip_group(b, i, b'}');
        } else if c == b'[' {
            i = skip_group(b, i, b']');
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            // 42, 0.5, 1e3, 0x1f, 5m, 1h30m
            while i < b.len() && (ident(b[i]) || b[i] == b'.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            let mut j = i;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            let lower = word.to_ascii_lowercase();
            if LABEL_LIST_WORDS.contains(&lower.as_str()) {
                if b.get(j) == Some(&b'(') {
                    i = skip_group(b, j, b')');
                }
                continue;
            }
            if b.get(j) == Some(&b'(') || PROMQL_WORDS.contains(&lower.as_str()) {
                continue;
            }
            out.insert(word.to_string());
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn the_promql_reader_finds_metric_names_only() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(r#"sum by (kind, le) (rate(a_bucket{kind=~"x|y", instance!="b{c}"}[5m] offset 1h))"#),
        ["a_bucket"]
    );
    assert_eq!(
        names(
            "time() - max by (namespace, job, kind) (b) > 20 * 60 # THRESHOLD: c d\nand on (kind) group_left (version) sum without (instance) (e) > 0"
        ),
        ["b", "e"]
    );
    assert_eq!(
        names(
            r#"label_replace(vector(1), "kind", "f_total", "", "") or histogram_quantile(0.95, g[1m:10s]) unless h @ start() or 1e3 BOOL i"#
        ),
        ["g", "h", "i"]
    );
    assert_eq!(
        names("{__name__=~\"j.*\"} or k:rate5m or l.m"),
        ["k:rate5m", "l", "m"]
    );
}

#[test]
fn the_rule_reader_finds_every_expr() {
    let (exprs, rules) = rule_exprs(&std::fs::read_to_string(alerts_path()).unwrap());
    assert_eq!(exprs.len(), rules, "one expr per rule: {exprs:#?}");
    assert!(rules >= 7, "{rules} rules");
    for e in &exprs {
        assert!(!e.trim().is_empty() && !e.contains("expr:"), "{e:?}");
    }
}

/// Metric names of a Prometheus text exposition, and its families (`# TYPE`).
fn exposition_names(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut names = BTreeSet::new();
    let mut families = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.insert(rest.split_whitespace().next().unwrap().to_string());
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    (names, families)
}

/// Metrics Prometheus itself makes at scrape time (not the binary's).
const SCRAPE_METRICS: &[&str] = &["up"];

// ---------------------------------------------------------------------------
// Processes, files, HTTP

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn get_text(http: &reqwest::Client, url: &str) -> (u16, String) {
    let r = http
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A Prometheus server of the test's own: 127.0.0.1, temp storage, 1 s scrape
/// and evaluation intervals, the project's rule file.
struct Prometheus {
    base: String,
    http: reqwest::Client,
    server: PrivateServer,
}

impl Prometheus {
    async fn start(target_port: u16) -> Prometheus {
        let server = servers::prometheus(&format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {alerts}\n\
             scrape_configs:\n  - job_name: seatflow-reconciler\n    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n",
            alerts = alerts_path().display()
        ));
        Prometheus {
            base: format!("http://127.0.0.1:{}", server.port()),
            http: http(),
            server,
        }
    }

    /// `GET /api/v1/<path>?params`; the `data` of a successful answer, or the
    /// error text.
    async fn api(&self, path: &str, params: &[(&str, String)]) -> Result<Value, String> {
        let url =
            url::Url::parse_with_params(&format!("{}/api/v1/{path}", self.base), params).unwrap();
        let r = self
            .http
            .get(url.as_str())
            .send()
            .await
            .map_err(|e| format!("GET {path}: {e}"))?;
        let body = r.text().await.map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if v["status"] != "success" {
            return Err(format!("{} {}", v["errorType"], v["error"]));
        }
        if let Some(w) = v["warnings"].as_array().filter(|w| !w.is_empty()) {
            return Err(format!("warnings: {w:?}"));
        }
        Ok(v["data"].clone())
    }

    async fn instant(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("query", &[("query", expr.to_string())]).await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    async fn range(&self, expr: &str, seconds: i64) -> Result<Vec<Value>, String> {
        let now = chrono::Utc::now().timestamp();
        let data = self
            .api(
                "query_range",
                &[
                    ("query", expr.to_string()),
                    ("start", (now - seconds).to_string()),
                    ("end", now.to_string()),
                    ("step", "1".to_string()),
                ],
            )
            .await?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }
}

/// The numeric values of an instant-vector sample or of a range series.
fn values(series: &Value) -> Vec<f64> {
    let one = |p: &Value| p[1].as_str().and_then(|s| s.parse::<f64>().ok());
    match (series.get("value"), series.get("values")) {
        (Some(v), _) => one(v).into_iter().collect(),
        (_, Some(vs)) => vs.as_array().unwrap().iter().filter_map(one).collect(),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------
/// A deviation from the contract that holds nothing (a wider `order_no`):
/// the deviations' family has a series only where the schema deviates, and
/// the dashboards' panel and the alert must find one.
async fn deviate_harmlessly(env: &TestEnv) {
    env.sql("ALTER TABLE ticket_order MODIFY order_no VARCHAR(64) NOT NULL")
        .await;
}

/// A daemon whose MySQL user has exactly the documented grants, one of
/// which is then taken away at no cost: `DELETE` on `reconcile_fix` (the
/// audit's retention, tried before every run). The permission-denied
/// family has a series only once a store refused something, and the
/// dashboards' panel and the alert must find one.
async fn daemon_refused_harmlessly(env: &TestEnv) -> (Daemon, DbUser, u16) {
    let name = format!("sfo_{}", &env.db["sf_test_".len()..]);
    let grants = seatflow_reconciler::store::mysql::grants::grant_statements(
        &env.db,
        &format!("'{name}'@'%'"),
        true,
        false,
    );
    let user = DbUser::create(env, &name, &grants).await;
    let port = free_port();
    let mut cmd = daemon_command(env, port);
    cmd.env("SEATFLOW__MYSQL__URL", user.url(env));
    // A replica configured (the test's own server, which replicates
    // nothing: its chunks read the primary), so its families are exported.
    cmd.env("SEATFLOW__MYSQL__REPLICA_URL", &env.db_url);
    let d = Daemon::start(cmd, port).await;
    env.sql(&format!(
        "REVOKE DELETE ON `{}`.`reconcile_fix` FROM '{name}'@'%'",
        env.db
    ))
    .await;
    wait_until("a refusal and a run are counted", Duration::from_secs(60), || async {
        let m = d.metrics().await;
        sample(
            &m,
            r#"seatflow_reconcile_permission_denied_total{need="DELETE on reconcile_fix",store="mysql"}"#,
        ) >= 1.0
            && sample(
                &m,
                r#"seatflow_reconcile_runs_total{kind="paid_seats",outcome="success"}"#,
            ) >= 1.0
    })
    .await;
    (d, user, port)
}

// Tests

/// (a) Every metric the dashboards and the alert rules select exists in a
/// real scrape of the running daemon, and the dashboard shows every family.
#[tokio::test]
async fn dashboards_and_alerts_use_only_exported_metrics() {
    let env = TestEnv::new().await;
    deviate_harmlessly(&env).await;
    let (d, _user, _) = daemon_refused_harmlessly(&env).await;
    let (exported, families) = exposition_names(&d.metrics().await);
    assert!(families.len() >= 12, "families: {families:?}");

    let mut used: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut dashboard_names = BTreeSet::new();
    for q in all_dashboard_queries() {
        let names = metric_names(&grafana_subst(&q.expr));
        assert!(!names.is_empty(), "{}: selects no metric: {}", q.at, q.expr);
        for n in names {
            dashboard_names.insert(n.clone());
            used.entry(n).or_default().push(q.at.clone());
        }
    }
    let mut rules = std::fs::read_to_string(alerts_path()).unwrap();
    rules.push_str(&std::fs::read_to_string(cronjob_alerts_path()).unwrap());
    let (exprs, n_rules) = rule_exprs(&rules);
    assert_eq!(
        exprs.len(),
        n_rules,
        "could not read every rule's expr: {exprs:#?}"
    );
    for (i, e) in exprs.iter().enumerate() {
        let names = metric_names(e);
        assert!(
            !names.is_empty(),
            "alerts.yaml rule #{}: selects no metric: {e}",
            i + 1
        );
        for n in names {
            used.entry(n)
                .or_default()
                .push(format!("alerts.yaml rule #{}", i + 1));
        }
    }

    let missing: Vec<String> = used
        .iter()
        .filter(|(n, _)| !exported.contains(*n) && !SCRAPE_METRICS.contains(&n.as_str()))
        .map(|(n, at)| format!("{n} (used by {})", at.join(", ")))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics used but not exported by the binary:\n  {}\nexported: {exported:?}",
        missing.join("\n  ")
    );
    // Only the daemon's own series on the dashboard (`up` belongs to alerts).
    for n in &dashboard_names {
        assert!(
            n.starts_with("seatflow_") || n.starts_with("process_"),
            "dashboard uses {n}"
        );
    }
    // The dashboard shows every seatflow family the binary exports.
    let unshown: Vec<&String> = families
        .iter()
        .filter(|f| f.starts_with("seatflow_"))
        .filter(|f| {
            !dashboard_names.iter().any(|n| {
                n == *f
                    || n.strip_prefix(f.as_str())
                        .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))
            })
        })
        .collect();
    assert!(
        unshown.is_empty(),
        "exported but on no dashboard panel: {unshown:?}"
    );

    // docs/metrics.md lists exactly the families a scrape shows (the fast
    // check of types and labels is operations::docs).
    let entries = seatflow_test_support::docs::metric_entries();
    let unlisted: Vec<&String> = families
        .iter()
        .filter(|f| !entries.iter().any(|e| e.covers(f)))
        .collect();
    assert!(
        unlisted.is_empty(),
        "exported, not in docs/metrics.md: {unlisted:?}"
    );
    let stale: Vec<&String> = entries
        .iter()
        .filter(|e| !families.iter().any(|f| e.covers(f)))
        .map(|e| &e.name)
        .collect();
    assert!(
        stale.is_empty(),
        "in docs/metrics.md, not exported: {stale:?}"
    );
}

/// Seeds drift in showtime 1 the way tests/it/daemon/run.rs does, plus an expired
/// order: one orphan lock, one paid seat not "2", one expired PENDING order.
/// The hash is written before the showtime row, so a running daemon never
/// sees a half-seeded showtime.
async fn seed_small_drift(env: &TestEnv) {
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.order(1, "PAID", &["A-2"], -600).await.unwrap();
    env.fx.order(1, "PENDING", &["A-3"], -600).await.unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "0"), ("A-3", "1")])
        .await
        .unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
}

/// `n` orphan locks in showtime 2 (hall 2, one row of `n` seats).
async fn seed_orphan_locks(env: &TestEnv, n: usize) {
    let seats = env.fx.hall(2, 1, n).await.unwrap();
    let values: Vec<(&str, &str)> = seats.iter().map(|s| (s.as_str(), "1")).collect();
    env.fx.warm(2, &values).await.unwrap();
    env.fx.showtime(2, 2, 90, "ON_SALE").await.unwrap();
}

fn alert_state(alerts: &Value, name: &str, kind: &str) -> Option<String> {
    alerts["alerts"].as_array()?.iter().find_map(|a| {
        (a["labels"]["alertname"] == name && a["labels"]["kind"] == kind)
            .then(|| a["state"].as_str().unwrap_or("?").to_string())
    })
}

/// (b) A real Prometheus scrapes the daemon with the project's rules loaded:
/// every dashboard query runs and returns data after drift is repaired, every
/// rule evaluates, and a repair spike makes the spike alert pending/firing.
#[tokio::test]
async fn prometheus_runs_every_dashboard_query_and_the_spike_alert_fires() {
    let queries = all_dashboard_queries();
    let rules_text = std::fs::read_to_string(alerts_path()).unwrap();
    let env = TestEnv::new().await;
    deviate_harmlessly(&env).await;
    let (d, _user, port) = daemon_refused_harmlessly(&env).await;
    assert_eq!(
        d.get("/readyz").await.unwrap().0,
        200,
        "readyz (sets dependency_up)"
    );
    let prom = Prometheus::start(port).await;
    let target = format!("127.0.0.1:{port}");

    // The rules Prometheus loaded are exactly the file's alerts.
    let rules = prom.api("rules", &[]).await.unwrap();
    let loaded: BTreeSet<String> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .filter_map(|r| r["name"].as_str().map(String::from))
        .collect();
    assert_eq!(
        loaded,
        alert_names(&rules_text),
        "rules loaded by Prometheus"
    );

    // Prometheus has the zeros before any repair, so increases are seen.
    wait_until(
        with_log("the first scrape is stored", &prom.server),
        Duration::from_secs(60),
        || async {
            prom.instant(&format!(
                r#"seatflow_reconcile_fixes_total{{instance="{target}"}}"#
            ))
            .await
            .is_ok_and(|r| r.len() == 5)
        },
    )
    .await;

    seed_small_drift(&env).await;
    wait_until(
        "the daemon repairs the drift",
        Duration::from_secs(60),
        || async {
            let m = d.metrics().await;
            ["orphan_locks", "paid_seats", "expired_orders"]
                .iter()
                .all(|k| {
                    sample(
                        &m,
                        &format!(r#"seatflow_reconcile_fixes_total{{kind="{k}"}}"#),
                    ) >= 1.0
                })
        },
    )
    .await;
    wait_until(with_log("Prometheus has scraped the repairs", &prom.server), Duration::from_secs(60), || async {
        prom.instant(r#"sum(seatflow_reconcile_fixes_total{kind=~"orphan_locks|paid_seats|expired_orders"} > 0)"#)
            .await
            .is_ok_and(|r| r.first().is_some_and(|s| values(s).first() >= Some(&3.0)))
    })
    .await;
    // Every dashboard query: no error, and data, both as Grafana's instant
    // query (stat panels) and as its range query (time series). Rates and
    // quantiles need a few more scrapes and runs after the repairs: the
    // queries are asked again until all of them answer, not after a fixed
    // sleep; 60 s is a hang guard only.
    let dashboard = async || {
        let mut problems = Vec::new();
        let mut repairs_seen = false;
        for q in &queries {
            let expr = grafana_subst(&q.expr);
            match prom.instant(&expr).await {
                Err(e) => problems.push(format!("{}: instant query failed: {e}\n    {expr}", q.at)),
                Ok(r) if r.is_empty() => problems.push(format!(
                    "{}: instant query returned no data\n    {expr}",
                    q.at
                )),
                Ok(r) if q.at.contains("variable $instance") => {
                    if !r.iter().any(|s| s["metric"]["instance"] == target.as_str()) {
                        problems.push(format!("{}: no series of instance {target}: {r:?}", q.at));
                    }
                }
                Ok(_) => {}
            }
            if q.variable {
                continue;
            }
            match prom.range(&expr, 30).await {
                Err(e) => problems.push(format!("{}: range query failed: {e}\n    {expr}", q.at)),
                Ok(r) if r.is_empty() => problems.push(format!(
                    "{}: range query returned no data\n    {expr}",
                    q.at
                )),
                Ok(r) => {
                    // The repairs panel must show the orphan-lock repair.
                    if expr.contains("seatflow_reconcile_fixes_total") && expr.contains("rate(") {
                        repairs_seen |= r.iter().any(|s| {
                            s["metric"]["kind"] == "orphan_locks"
                                && values(s).iter().any(|v| *v > 0.0)
                        });
                    }
                }
            }
        }
        (problems, repairs_seen)
    };
    let asked = Instant::now();
    let (problems, repairs_seen) = loop {
        let (problems, repairs_seen) = dashboard().await;
        if (problems.is_empty() && repairs_seen) || asked.elapsed() > Duration::from_secs(60) {
            break (problems, repairs_seen);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(
        problems.is_empty(),
        "dashboard queries:\n{}",
        problems.join("\n")
    );
    assert!(
        repairs_seen,
        "no dashboard repair-rate panel showed the orphan_locks repair"
    );

    // Three repairs are no spike.
    let alerts = prom.api("alerts", &[]).await.unwrap();
    assert_eq!(
        alert_state(&alerts, "SeatflowReconcilerRepairSpike", "orphan_locks"),
        None,
        "spike alert active after 1 repair: {alerts}"
    );

    // A spike: 400 orphan locks at once.
    seed_orphan_locks(&env, 400).await;
    wait_until(
        "the daemon repairs the spike",
        Duration::from_secs(60),
        || async {
            sample(
                &d.metrics().await,
                r#"seatflow_reconcile_fixes_total{kind="orphan_locks"}"#,
            ) >= 401.0
        },
    )
    .await;
    let start = Instant::now();
    let last = loop {
        let alerts = prom.api("alerts", &[]).await.unwrap_or(Value::Null);
        if matches!(
            alert_state(&alerts, "SeatflowReconcilerRepairSpike", "orphan_locks").as_deref(),
            Some("pending" | "firing")
        ) {
            break alerts;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "SeatflowReconcilerRepairSpike{{kind=\"orphan_locks\"}} is not pending or firing after 60 s: {alerts}\n{:?}",
            prom.instant("sum by (kind) (rate(seatflow_reconcile_fixes_total[10m])) * 60")
                .await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let spike = last["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["labels"]["alertname"] == "SeatflowReconcilerRepairSpike")
        .unwrap();
    assert_eq!(spike["labels"]["severity"], "warning");
    assert_eq!(spike["labels"]["job"], "seatflow-reconciler", "{spike}");
    let description = spike["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains("orphan_locks") && !description.contains("{{"),
        "{description}"
    );

    // Every rule evaluated without error all along.
    let rules = prom.api("rules", &[]).await.unwrap();
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            assert_eq!(
                r["health"], "ok",
                "rule {} failed to evaluate: {}",
                r["name"], r["lastError"]
            );
        }
    }
    // No other alert is even pending on a healthy daemon (a missed scrape on
    // a busy machine may make SeatflowReconcilerDown pending: not a defect).
    let alerts = prom.api("alerts", &[]).await.unwrap();
    // The refusal the test made fires its alert, named by store and need.
    assert!(
        alerts["alerts"].as_array().unwrap().iter().any(|a| {
            a["labels"]["alertname"] == "SeatflowReconcilerPermissionDenied"
                && a["labels"]["store"] == "mysql"
                && a["labels"]["need"] == "DELETE on reconcile_fix"
                && a["state"] == "firing"
        }),
        "SeatflowReconcilerPermissionDenied is not firing: {alerts}"
    );
    let others: Vec<&Value> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["labels"]["alertname"] != "SeatflowReconcilerRepairSpike")
        // Its replica (a server that replicates nothing) is never read:
        // pending for its `for` once two scrapes show it.
        .filter(|a| {
            !(a["labels"]["alertname"] == "SeatflowReconcilerReplicaNotRead"
                && a["state"] == "pending")
        })
        // The refusal the test made (`daemon_refused_harmlessly`).
        .filter(|a| {
            !(a["labels"]["alertname"] == "SeatflowReconcilerPermissionDenied"
                && a["labels"]["need"] == "DELETE on reconcile_fix")
        })
        .filter(|a| {
            !(a["labels"]["alertname"] == "SeatflowReconcilerDown" && a["state"] == "pending")
        })
        // The seeded order had expired 10 minutes before its repair: late
        // by the drift-age objective (5 minutes), pending for its `for`.
        .filter(|a| {
            !(a["labels"]["alertname"] == "SeatflowReconcilerDriftRepairedLate"
                && a["labels"]["kind"] == "expired_orders"
                && a["state"] == "pending")
        })
        .collect();
    assert!(others.is_empty(), "unexpected alerts: {others:?}");
}

/// Runs a command with a deadline; kills it when it passes.
async fn run_with_timeout(mut cmd: Command, limit: Duration) -> (i32, String, String) {
    let dir = TempDir::new("once").unwrap();
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("the binary starts");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "timed out after {limit:?}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(&out_path).unwrap(),
        std::fs::read_to_string(&err_path).unwrap(),
    )
}

/// One exposition line → (name, labels, value). Enough for the Pushgateway's
/// output of our metrics (label values are plain identifiers); the product
/// reads the Pushgateway's JSON API instead.
fn parse_line(line: &str) -> Option<(String, BTreeMap<String, String>, f64)> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let (name, labels) = match series.split_once('{') {
        Some((n, rest)) => (n, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    let mut map = BTreeMap::new();
    for pair in labels.split("\",").filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once("=\"")?;
        map.insert(
            k.trim_matches(',').to_string(),
            v.trim_end_matches('"').to_string(),
        );
    }
    Some((name.to_string(), map, value.parse().ok()?))
}

/// (c) `once --pushgateway URL` pushes its run's metrics to a real
/// Pushgateway, grouped under job="seatflow-reconciler" with no instance.
#[tokio::test]
async fn once_pushes_the_run_to_a_pushgateway_without_instance() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();

    let pgw = servers::pushgateway();
    let http = http();
    let base = format!("http://127.0.0.1:{}", pgw.port());

    let mut once = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEATFLOW__")) {
        once.env_remove(k);
    }
    once.args(["once", "--output", "json", "--pushgateway", &base])
        .env("RUST_LOG", "warn")
        .env("SEATFLOW__MYSQL__URL", &env.db_url)
        .env("SEATFLOW__REDIS__URL", seatflow_test_support::redis_url())
        .env("SEATFLOW__REDIS__KEY_PREFIX", &env.prefix)
        .env("SEATFLOW__RECONCILE__ORPHAN_GRACE", "0s");
    let (code, out, err) = run_with_timeout(clone_command(&once), Duration::from_secs(60)).await;
    assert_eq!(code, 0, "once failed:\n{err}\n{out}");
    let report: Value = serde_json::from_str(&out).expect("stdout is one JSON object");
    assert_eq!(report["fixed"]["orphan_locks_released"], 1, "{report}");

    let (status, text) = get_text(&http, &format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    let ours: Vec<(String, BTreeMap<String, String>, f64)> = text
        .lines()
        .filter_map(parse_line)
        .filter(|(name, _, _)| name.starts_with("seatflow_") || name.starts_with("push_"))
        .collect();
    assert!(!ours.is_empty(), "nothing pushed:\n{text}");
    for (name, labels, _) in &ours {
        assert_eq!(
            labels.get("job").map(String::as_str),
            Some("seatflow-reconciler"),
            "{name} {labels:?}"
        );
        assert!(
            labels.get("instance").is_none_or(|i| i.is_empty()),
            "{name} has instance {:?}: the grouping key must not carry one",
            labels["instance"]
        );
    }
    let fixes = ours
        .iter()
        .find(|(n, l, _)| {
            n == "seatflow_reconcile_fixes_total"
                && l.get("kind").map(String::as_str) == Some("orphan_locks")
        })
        .unwrap_or_else(|| panic!("no fixes_total{{kind=\"orphan_locks\"}} pushed:\n{text}"));
    assert_eq!(fixes.2, 1.0);
    let pushed_at = ours
        .iter()
        .find(|(n, _, _)| n == "push_time_seconds")
        .map(|(_, _, v)| *v)
        .expect("push_time_seconds of the group");
    assert!(pushed_at > 1.7e9, "push_time_seconds {pushed_at}");
    // build_info (and dry_run) once per push, in a group without `kind`:
    // one CronJob is one reconciler, not five.
    for name in [
        "seatflow_reconciler_build_info",
        "seatflow_reconciler_dry_run",
    ] {
        let series: Vec<_> = ours.iter().filter(|(n, _, _)| n == name).collect();
        assert_eq!(series.len(), 1, "{name} once per push: {series:?}");
        assert!(
            series[0].1.get("kind").is_none_or(|k| k.is_empty()),
            "{series:?}"
        );
    }
    // Every family the dashboards and rules use from the binary is in the push.
    let pushed: BTreeSet<&str> = ours.iter().map(|(n, _, _)| n.as_str()).collect();
    for name in [
        "seatflow_reconcile_last_success_timestamp_seconds",
        "seatflow_reconcile_runs_total",
        "seatflow_reconcile_drift",
        "seatflow_reconcile_backlog",
        "seatflow_reconcile_run_duration_seconds_bucket",
    ] {
        assert!(pushed.contains(name), "{name} not pushed");
    }
    let last_success = ours
        .iter()
        .find(|(n, l, _)| {
            n == "seatflow_reconcile_last_success_timestamp_seconds"
                && l.get("kind").map(String::as_str) == Some("orphan_locks")
        })
        .map(|(_, _, v)| *v)
        .unwrap();
    assert!(last_success > 1.7e9, "last success {last_success}");
    let first = |name: &str| {
        ours.iter()
            .find(|(n, l, _)| {
                n == name && l.get("kind").map(String::as_str) == Some("orphan_locks")
            })
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| panic!("{name} not pushed"))
    };
    let first_duration_sum = first("seatflow_reconcile_run_duration_seconds_sum");
    assert_eq!(first("seatflow_reconcile_run_duration_seconds_count"), 1.0);
    assert_eq!(
        first("seatflow_reconcile_drift_age_seconds_count"),
        1.0,
        "one lock released, one drift age"
    );

    // A second run continues the counters; a failed run keeps the last success.
    env.fx.warm(1, &[("A-2", "1")]).await.unwrap();
    let (code, _, err) = run_with_timeout(clone_command(&once), Duration::from_secs(60)).await;
    assert_eq!(code, 0, "{err}");
    // Redis refuses to show the seat hash to the reconciler's user (NOPERM),
    // so every chunk fails. (A corrupt cursor key no longer fails a run: it
    // is replaced, rule 13.) The user may touch showtime 0's hash only: the
    // key the start's check asks about, so the check passes and the run
    // meets the refusal.
    let user = seatflow_test_support::AclUser::create(&env, &[], &[0]).await;
    let mut failing = clone_command(&once);
    failing.env("SEATFLOW__REDIS__URL", user.url());
    let (code, _, _) = run_with_timeout(failing, Duration::from_secs(60)).await;
    assert_eq!(
        code, 1,
        "orphan-locks fails: its seat hashes cannot be read"
    );
    let (_, text) = get_text(&http, &format!("{base}/metrics")).await;
    let value = |name: &str, extra: &[(&str, &str)]| {
        text.lines()
            .filter_map(parse_line)
            .find(|(n, l, _)| {
                n == name
                    && l.get("kind").map(String::as_str) == Some("orphan_locks")
                    && extra
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| v)
    };
    assert_eq!(
        value("seatflow_reconcile_fixes_total", &[]),
        Some(2.0),
        "counters continue"
    );
    assert_eq!(
        value("seatflow_reconcile_runs_total", &[("outcome", "success")]),
        Some(2.0)
    );
    assert_eq!(
        value("seatflow_reconcile_runs_total", &[("outcome", "failure")]),
        Some(1.0)
    );
    // Histograms go on like counters: three runs, two repairs.
    assert_eq!(
        value("seatflow_reconcile_run_duration_seconds_count", &[]),
        Some(3.0)
    );
    assert_eq!(
        value(
            "seatflow_reconcile_run_duration_seconds_bucket",
            &[("le", "+Inf")]
        ),
        Some(3.0)
    );
    let duration_sum = value("seatflow_reconcile_run_duration_seconds_sum", &[]).unwrap();
    assert!(
        duration_sum >= first_duration_sum,
        "{duration_sum} < {first_duration_sum}"
    );
    assert_eq!(
        value("seatflow_reconcile_drift_age_seconds_count", &[]),
        Some(2.0)
    );
    assert_eq!(
        value(
            "seatflow_reconcile_drift_age_seconds_bucket",
            &[("le", "86400")]
        ),
        Some(2.0),
        "both repairs within a day of first sight"
    );
    let kept = value("seatflow_reconcile_last_success_timestamp_seconds", &[]).unwrap();
    assert!(
        kept > last_success,
        "the second (successful) run's time is kept: {kept} vs {last_success}"
    );
}

/// `Command` is not `Clone`; rebuild one with the same program, args and env.
fn clone_command(c: &Command) -> Command {
    let mut out = Command::new(c.get_program());
    out.args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => out.env(k, v),
            None => out.env_remove(k),
        };
    }
    out
}
