//! The documents an operator reads are complete and true to the code: every
//! configuration key in `docs/configuration.md` with its default, every
//! metric family in `docs/metrics.md` with its type and labels, every alert
//! in the runbook (`docs/troubleshooting.md`), every subcommand's `--help`
//! with examples and its page, every link to a file or heading that
//! exists; and the short pages stay short. A missing entry and an entry
//! for something that no longer exists both fail, naming it. No server:
//! files, the code's registry and the binary's help.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use seatflow_reconciler::config::Settings;
use seatflow_reconciler::metrics::Metrics;
use seatflow_reconciler::model::Kind;
use seatflow_test_support::docs::{self, MetricEntry, code_spans, read, table_rows};

/// Every key of `config/default.toml`, dotted (`jobs.paid_seats.batch_size`),
/// with its default as TOML writes it.
fn default_keys() -> BTreeMap<String, String> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, String>) {
        for (k, v) in table {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(t) => walk(&key, t, out),
                v => {
                    out.insert(key, v.to_string());
                }
            }
        }
    }
    let table: toml::Table = read("config/default.toml").parse().unwrap();
    let mut out = BTreeMap::new();
    walk("", &table, &mut out);
    out
}

#[test]
fn every_configuration_key_has_its_default_and_meaning() {
    let keys = default_keys();
    assert!(keys.len() > 50, "config/default.toml: {keys:?}");
    let mut documented = BTreeMap::new();
    for row in table_rows(
        &read("docs/configuration.md"),
        "| key | default | meaning |",
    ) {
        let [key, default, meaning] = row.as_slice() else {
            panic!("docs/configuration.md: a row of 3 cells: {row:?}");
        };
        let key = code_spans(key).into_iter().next().unwrap_or_default();
        let default = code_spans(default).into_iter().next().unwrap_or_default();
        assert!(
            meaning.len() > 10,
            "docs/configuration.md: `{key}` has no meaning: {row:?}"
        );
        assert!(
            documented.insert(key.clone(), default).is_none(),
            "docs/configuration.md: `{key}` twice"
        );
    }
    let mut problems = Vec::new();
    for (k, v) in &keys {
        match documented.get(k) {
            None => problems.push(format!("`{k}`: no row; add | `{k}` | `{v}` | … |")),
            Some(d) if d != v => {
                problems.push(format!("`{k}`: documented default `{d}`, default `{v}`"))
            }
            Some(_) => {}
        }
    }
    for k in documented.keys().filter(|k| !keys.contains_key(*k)) {
        problems.push(format!(
            "`{k}`: documented, not a key of config/default.toml"
        ));
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md against config/default.toml:\n{}",
        problems.join("\n")
    );
}

/// Every family the daemon can register, assembled as the daemon does
/// (src/daemon/mod.rs, src/daemon/runner/): the jobs' and the process's, the passes',
/// the change checks', the refused permissions' and the replica's, each
/// family that has series only on an event given one.
fn registered_families() -> Vec<prometheus::proto::MetricFamily> {
    let settings = Settings::load_with_env(None, Vec::new()).unwrap();
    let metrics = Metrics::for_jobs(&Kind::ALL);
    metrics.export_passes(&seatflow_reconciler::metrics::PassMetrics::new(1));
    let changes = seatflow_reconciler::daemon::change_state::Changes::new(&settings);
    metrics.export_changes(&changes.metrics);
    let denials = seatflow_reconciler::run::refusals::Denials::default();
    denials.record(
        &seatflow_reconciler::error::Denial {
            store: seatflow_reconciler::error::Stage::Mysql,
            replica: false,
            need: "UPDATE on ticket_order".into(),
        },
        1,
        "refused",
    );
    metrics.register(vec![Box::new(denials.counter())]);
    // A pool that never connects: the replica's families need none.
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .connect_lazy("mysql://nobody@127.0.0.1:9/none")
        .unwrap();
    let replica = seatflow_reconciler::run::replica_choice::Replica::new(
        seatflow_reconciler::store::mysql::MysqlStore::from_pool(pool),
        Duration::from_secs(5),
    );
    metrics.register(replica.collectors());
    let no_reads = || seatflow_reconciler::store::redis::SeatHashReads {
        fast: 0,
        through_crate: 0,
    };
    metrics.register(vec![Box::new(
        seatflow_reconciler::metrics::seat_reads::SeatHashReadMetrics::new(no_reads),
    )]);
    metrics.show_contract(&[
        seatflow_reconciler::run::jobs::deviations::DeviationReport {
            table: "ticket_order",
            column: "order_no",
            kind: "length",
            found: String::new(),
            expected: String::new(),
            holds: false,
            warns: false,
            detail: String::new(),
            fix: String::new(),
        },
    ]);
    metrics.gather()
}

fn type_name(t: prometheus::proto::MetricType) -> &'static str {
    use prometheus::proto::MetricType;
    match t {
        MetricType::COUNTER => "counter",
        MetricType::GAUGE => "gauge",
        MetricType::HISTOGRAM => "histogram",
        MetricType::SUMMARY => "summary",
        MetricType::UNTYPED => "untyped",
    }
}

#[tokio::test]
async fn every_metric_family_has_its_type_labels_and_meaning() {
    let entries = docs::metric_entries();
    let families = registered_families();
    assert!(families.len() > 30, "registered: {}", families.len());
    let entry = |name: &str| -> Option<&MetricEntry> { entries.iter().find(|e| e.covers(name)) };
    let mut problems = Vec::new();
    for f in &families {
        let name = f.name();
        let Some(e) = entry(name) else {
            problems.push(format!("`{name}`: registered, not in docs/metrics.md"));
            continue;
        };
        let ty = type_name(f.get_field_type());
        if !e.types.contains(ty) {
            problems.push(format!("`{name}`: a {ty}, documented as {:?}", e.types));
        }
        let labels: BTreeSet<String> = f
            .get_metric()
            .iter()
            .flat_map(|m| m.get_label().iter().map(|l| l.name().to_string()))
            .collect();
        if !e.name.ends_with('*') && labels != e.labels {
            problems.push(format!(
                "`{name}`: labels {labels:?}, documented {:?}",
                e.labels
            ));
        }
        if e.meaning.len() < 10 {
            problems.push(format!("`{name}`: no meaning in docs/metrics.md"));
        }
    }
    for e in &entries {
        if !families.iter().any(|f| e.covers(f.name())) {
            problems.push(format!(
                "`{}`: in docs/metrics.md, registered by no code",
                e.name
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/metrics.md:\n{}",
        problems.join("\n")
    );
}

/// The alert names of a rendered rule file.
fn alerts_of(path: &str) -> BTreeSet<String> {
    read(path)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(|n| n.trim().trim_matches('\'').trim_matches('"').to_string())
        .collect()
}

#[test]
fn every_alert_has_one_runbook_entry() {
    let alerts: BTreeSet<String> = [
        "deploy/prometheus/alerts.yaml",
        "deploy/prometheus/alerts-cronjob.yaml",
    ]
    .iter()
    .flat_map(|p| alerts_of(p))
    .collect();
    assert!(alerts.len() > 15, "{alerts:?}");
    let runbook = read("docs/troubleshooting.md");
    let mut entries: BTreeMap<String, usize> = BTreeMap::new();
    for line in runbook.lines().filter(|l| l.starts_with('#')) {
        let title = line.trim_start_matches('#').trim();
        if title.starts_with("SeatflowReconciler") {
            *entries.entry(title.to_string()).or_default() += 1;
        }
    }
    let missing: Vec<&String> = alerts
        .iter()
        .filter(|a| !entries.contains_key(*a))
        .collect();
    assert!(
        missing.is_empty(),
        "alerts without an entry (a `### <alert>` heading) in docs/troubleshooting.md: {missing:?}"
    );
    let stale: Vec<&String> = entries.keys().filter(|e| !alerts.contains(*e)).collect();
    assert!(
        stale.is_empty(),
        "docs/troubleshooting.md has entries for alerts no rule file has: {stale:?}"
    );
    let twice: Vec<&String> = entries
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(e, _)| e)
        .collect();
    assert!(twice.is_empty(), "more than one entry: {twice:?}");
}

/// The documents whose links are checked.
fn documents() -> Vec<String> {
    let mut out: Vec<String> = [
        "README.md",
        "ARCHITECTURE.md",
        "benches/README.md",
        "deploy/README.md",
        "monitoring/README.md",
        "dashboards/README.md",
        "tests/README.md",
    ]
    .map(String::from)
    .into();
    for dir in ["docs", "benches/results"] {
        for f in std::fs::read_dir(docs::repo().join(dir)).unwrap() {
            let name = f.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".md") {
                out.push(format!("{dir}/{name}"));
            }
        }
    }
    out
}

#[test]
fn every_link_reaches_a_file_and_heading_that_exist() {
    let repo = docs::repo();
    let mut broken = Vec::new();
    for doc in documents() {
        let dir = std::path::Path::new(&doc).parent().unwrap().to_path_buf();
        for link in docs::links(&read(&doc)) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                repo.join(&doc)
            } else {
                repo.join(&dir).join(file)
            };
            if !target.exists() {
                broken.push(format!("{doc}: {link} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor
                && target.is_file()
                && !docs::anchors(&std::fs::read_to_string(&target).unwrap()).contains(anchor)
            {
                broken.push(format!("{doc}: {link} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_pages_that_decide_stay_short() {
    for (doc, most) in [("README.md", 250), ("benches/README.md", 300)] {
        let lines = read(doc).lines().count();
        assert!(lines <= most, "{doc}: {lines} lines, at most {most}");
    }
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_subcommands_help_has_examples_and_its_page() {
    let top = help(&[]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect();
    assert!(commands.len() >= 6, "{top}");
    for c in &commands {
        let text = help(&[c]);
        let examples: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Examples:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .collect();
        assert!(
            !examples.is_empty() && examples.iter().all(|e| e.contains("seatflow-reconciler")),
            "`{c} --help` has no examples:\n{text}"
        );
        let pages: Vec<&str> = text
            .split_whitespace()
            .map(|w| w.trim_matches(|ch: char| "(),.;:\"".contains(ch)))
            .filter(|w| w.ends_with(".md"))
            .collect();
        assert!(!pages.is_empty(), "`{c} --help` names no page:\n{text}");
        for p in pages {
            assert!(
                docs::repo().join(p).is_file(),
                "`{c} --help` names {p}, which does not exist"
            );
        }
    }
}
