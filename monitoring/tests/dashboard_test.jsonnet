// promtool unit tests of dashboard queries, written against the queries as
// the mixin renders them (Grafana's variables substituted as "All"), so a
// change of a panel's query is tested as it ships. Rendered and run by
// deploy/test/observability.sh:
//
//   jsonnet -J monitoring -S monitoring/tests/dashboard_test.jsonnet > t.yaml
//   promtool test rules t.yaml
local mixin = import '../mixin.libsonnet';
local dashboards = mixin.grafanaDashboards + (mixin { _config+:: { mode: 'cronjob' } }).grafanaDashboards;

local subst(e) = std.foldl(
  function(acc, kv) std.strReplace(acc, kv[0], kv[1]),
  [['$__rate_interval', '5m'], ['$__range', '1h'], ['$namespace', '.*'], ['$instance', '.*'], ['$cluster', '.*']],
  e
);
local query(file, title, refId='A') =
  local p = [p for p in dashboards[file].panels if p.title == title];
  assert std.length(p) == 1 : 'no single panel %s in %s' % [title, file];
  local t = [t for t in p[0].targets if t.refId == refId];
  subst(t[0].expr);

// Three jobs as a daemon exports them: expired_orders succeeded at minute 5
// and keeps succeeding; orphan_locks has run (and failed) every minute but
// never succeeded (its gauge is 0); missing_hashes is disabled (never ran).
local jobs(job) = [
  {
    series: 'seatflow_reconcile_last_success_timestamp_seconds{job="%s", instance="a", namespace="seatflow", kind="expired_orders"}' % job,
    values: '0x4 300+60x30',
  },
  {
    series: 'seatflow_reconcile_runs_total{job="%s", instance="a", namespace="seatflow", kind="expired_orders", outcome="success"}' % job,
    values: '0 0 0 0 0 1+1x30',
  },
  {
    series: 'seatflow_reconcile_last_success_timestamp_seconds{job="%s", instance="a", namespace="seatflow", kind="orphan_locks"}' % job,
    values: '0x35',
  },
  {
    series: 'seatflow_reconcile_runs_total{job="%s", instance="a", namespace="seatflow", kind="orphan_locks", outcome="failure"}' % job,
    values: '0+1x35',
  },
  {
    series: 'seatflow_reconcile_last_success_timestamp_seconds{job="%s", instance="a", namespace="seatflow", kind="missing_hashes"}' % job,
    values: '0x35',
  },
  {
    series: 'seatflow_reconcile_runs_total{job="%s", instance="a", namespace="seatflow", kind="missing_hashes", outcome="success"}' % job,
    values: '0x35',
  },
];

local neverSucceeded(file, job) = {
  interval: '1m',
  input_series: jobs(job),
  promql_expr_test: [
    // The stat: a job that has run but never succeeded is the longest, with
    // time() - 0 (in production about 56 years: the panel maps it to
    // "never", red). A `> 0` filter on the gauge would hide it ("No data").
    {
      expr: query(file, 'Longest since a success'),
      eval_time: '30m',
      exp_samples: [{ labels: '{}', value: 1800 }],
    },
    // The time series: one line per job that has run, the disabled one absent.
    {
      expr: query(file, 'Time since last success, by kind'),
      eval_time: '30m',
      exp_samples: [
        { labels: '{kind="expired_orders"}', value: 0 },
        { labels: '{kind="orphan_locks"}', value: 1800 },
      ],
    },
  ],
};

std.manifestYamlDoc({
  rule_files: [],
  evaluation_interval: '1m',
  tests: [
    neverSucceeded('seatflow-reconciler.json', 'seatflow-reconciler'),
    neverSucceeded('seatflow-reconciler-cronjob.json', 'seatflow-reconciler'),
    // Shards: the newest completed pass over all processes, per shard.
    {
      interval: '1m',
      input_series: [
        { series: 'seatflow_reconcile_pass_last_completed_timestamp_seconds{job="seatflow-reconciler", instance="a", namespace="seatflow", shard="0"}', values: '0+60x10 600x20' },
        { series: 'seatflow_reconcile_pass_last_completed_timestamp_seconds{job="seatflow-reconciler", instance="b", namespace="seatflow", shard="0"}', values: '0x10 660+60x20' },
        { series: 'seatflow_reconcile_pass_active{job="seatflow-reconciler", instance="a", namespace="seatflow", shard="0"}', values: '1x10 0x20' },
        { series: 'seatflow_reconcile_pass_active{job="seatflow-reconciler", instance="b", namespace="seatflow", shard="0"}', values: '0x10 1x20' },
      ],
      promql_expr_test: [
        {
          expr: query('seatflow-reconciler.json', 'Time since the last completed pass, by shard'),
          eval_time: '20m',
          exp_samples: [{ labels: '{shard="0"}', value: 0 }],
        },
        {
          expr: query('seatflow-reconciler.json', 'Active process, by shard'),
          eval_time: '20m',
          exp_samples: [{ labels: '{instance="b", shard="0"}', value: 1 }],
        },
      ],
    },
  ],
}, quote_keys=false)
