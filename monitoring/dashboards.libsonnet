// The Grafana dashboard, one per mode: `seatflow-reconciler.json` (daemon and
// sidecar: scraped) and `seatflow-reconciler-cronjob.json` (pushed `once`
// runs: no scrape target, no passes, no process metrics).
//
// Several replicas each export their own series: gauges (drift, deferred,
// backlog, last success) are aggregated with `max by (kind)` (the replica
// that runs the pass has the current values; a standby shows 0), counters
// with `sum by (kind)` (each repair is made by exactly one replica).
local gr = import 'lib/grafana.libsonnet';
local u = import 'lib/util.libsonnet';

{
  local c = $._config,
  local daemon = c.mode == 'daemon',
  local multi = c.showMultiCluster,
  // Every query's matchers: the configured selector and the variables.
  local s = std.join(', ', [c.selector]
                           + (if multi then ['%s=~"$cluster"' % c.clusterLabel] else [])
                           + ['namespace=~"$namespace"', 'instance=~"$instance"']),
  local q(fmt) = fmt % { s: s },
  local warnS = c.jobNotSucceedingWarningSeconds,
  local critS = c.jobNotSucceedingCriticalSeconds,
  local passLimit = c.passStalledIntervals * c.sweepIntervalSeconds,
  // A last-success time of 0 (never since the process started) makes
  // time() - gauge about 56 years: shown as "never", in red.
  local never = gr.rangeMap(1e9, 'never', 'red'),

  // Jobs that have run at all (runs_total > 0): a job disabled in the
  // configuration keeps a last-success time of 0 and is not "failing".
  local sinceSuccess = q(|||
    (
      time() - max by (kind) (seatflow_reconcile_last_success_timestamp_seconds{%(s)s})
    )
    and on (kind)
    (sum by (kind) (seatflow_reconcile_runs_total{%(s)s}) > 0)
  |||),

  local overview = [
    [gr.stat('Drift now',
             'Drift found by the last completed scan of each job (seats, hashes or orders), summed over the five jobs; the maximum over replicas (the one running the pass has the current values, a standby shows 0). Includes suspects still waiting out the orphan grace period.',
             [gr.target(q('sum(max by (kind) (seatflow_reconcile_drift{%(s)s}))'), 'drift')],
             steps=[['green', null], ['orange', 1]]), 3, 4],
    [gr.stat('Deferred suspects',
             'Orphan suspects (locked or sold seats without a matching order) waiting out reconcile.orphan_grace before they may be repaired. In-flight checkouts show up here briefly; a steady number means real orphans.',
             [gr.target(q('sum(max by (kind) (seatflow_reconcile_deferred{%(s)s}))'), 'deferred')]), 3, 4],
    [gr.stat('Backlog now',
             'Drift left for later runs (batch_size reached, showtime busy) plus showtimes not scanned this run (scan_limit), summed over jobs.',
             [gr.target(q('sum(max by (kind) (seatflow_reconcile_backlog{%(s)s}))'), 'backlog')],
             steps=[['green', null], ['orange', 1]]), 3, 4],
    [gr.stat('Repairs in range',
             "Repairs applied in the dashboard's time range, all jobs and replicas. Every repair is also a row of the reconcile_fix audit table.",
             [gr.target(q('sum(increase(seatflow_reconcile_fixes_total{%(s)s}[$__range]))'), 'repairs', instant=true)],
             decimals=0,
             graph=false), 3, 4],
    [gr.stat('Errors in range',
             "Operational errors (mysql, redis, lock, audit) counted after retries in the dashboard's time range; invalid data is not included.",
             [gr.target(q('sum(increase(seatflow_reconcile_errors_total{%(s)s, stage!="invalid_data"}[$__range]))'), 'errors', instant=true)],
             steps=[['green', null], ['red', 1]],
             decimals=0,
             graph=false), 3, 4],
    [gr.stat('Longest since a success',
             'The longest time any job that has run has gone without a successful run (best replica per job). "never" (red) when a job has run but never succeeded. Orange and red at the warning and critical thresholds of SeatflowReconcilerJobNotSucceeding (%s and %s). Disabled jobs (no runs) are left out.' % [u.humanize(warnS), u.humanize(critS)],
             [gr.target('max(\n' + sinceSuccess + ')', 'seconds')],
             unit='s',
             steps=[['green', null], ['orange', warnS], ['red', critS]],
             mappings=[never]), 3, 4],
  ] + (if daemon then [
         [gr.stat('Dependencies',
                  "Whether every reconciler's last dependency probe reached MySQL and Redis (worst replica). Each process probes both every 10 seconds and on every GET /readyz (2-second timeout). SeatflowReconcilerStoreUnreachable fires after %s of DOWN." % u.humanize(u.seconds(c.storeUnreachableWindow) + u.seconds(c.storeUnreachableFor)),
                  [gr.target(q('min by (dependency) (seatflow_reconciler_dependency_up{%(s)s, instance!=""})'), '{{dependency}}')],
                  unit='none',
                  steps=[['red', null], ['green', 1]],
                  mappings=gr.valueMap({ '0': ['DOWN', 'red'], '1': ['UP', 'green'] }),
                  graph=false), 3, 4],
       ] else []) + [
    [gr.stat(if daemon then 'Reconcilers' else 'Pushes',
             if daemon then 'Reconciler processes reporting, by version (seatflow_reconciler_build_info, one series per process).' else 'Reconciler versions that pushed (seatflow_reconciler_build_info, pushed once per run, not per job).',
             [gr.target(q('count by (version) (seatflow_reconciler_build_info{%(s)s})'), '{{version}}')],
             graph=false), 3, 4],
    [gr.stat('Dry run',
             'Whether reconcilers run in dry-run mode (reconcile.dry_run or --dry-run): drift is detected and reported, nothing is written. DRY RUN (orange) when any reporting process is in dry run; SeatflowReconcilerDryRunLeftOn fires after %s of it.' % u.humanize(u.seconds(c.dryRunFor)),
             [gr.target(q('max(seatflow_reconciler_dry_run{%(s)s})'), 'dry run')],
             unit='none',
             steps=[['green', null], ['orange', 1]],
             mappings=gr.valueMap({ '0': ['off', 'green'], '1': ['DRY RUN', 'orange'] }),
             graph=false), 3, 4],
    [gr.stat('Drift repaired within %s' % u.humanize(c.driftAgeObjectiveSeconds),
             "Share of the repairs in the dashboard's time range whose drift had been seen for less than %s (first sighting → repair, seatflow_reconcile_drift_age_seconds). The objective of SeatflowReconcilerDriftRepairedLate is %s per kind." % [u.humanize(c.driftAgeObjectiveSeconds), u.percent(c.driftAgeObjectiveRatio)],
             [gr.target(q('sum(increase(seatflow_reconcile_drift_age_seconds_bucket{%(s)s, le=~"' + u.leRegex(c.driftAgeObjectiveSeconds) + '"}[$__range]))\n/\nsum(increase(seatflow_reconcile_drift_age_seconds_count{%(s)s}[$__range]))'), 'within objective', instant=true)],
             unit='percentunit',
             steps=[['red', null], ['orange', c.driftAgeObjectiveRatio - 0.04], ['green', c.driftAgeObjectiveRatio]],
             decimals=1,
             graph=false), 3, 4],
  ],

  local repairs = [
    [gr.timeseries('Repairs per minute, by kind',
                   'Repairs applied per minute by each job, summed over replicas (rate of seatflow_reconcile_fixes_total). SeatflowReconcilerRepairSpike fires above %s/min averaged over 10 minutes.' % c.repairSpikePerMinute,
                   [gr.target(q('sum by (kind) (rate(seatflow_reconcile_fixes_total{%(s)s}[$__rate_interval])) * 60'), '{{kind}}')],
                   unit='opm'), 12, 8],
    [gr.timeseries('Drift found by the last scan, by kind',
                   "Drift found by each job's last completed scan (seats, hashes or orders), maximum over replicas. It drops to zero on the next run once repaired; a level that stays up is SeatflowReconcilerDriftPersists.",
                   [gr.target(q('max by (kind) (seatflow_reconcile_drift{%(s)s})'), '{{kind}}')]), 12, 8],
    [gr.timeseries('Drift age at repair p50 / p95, by kind',
                   'How long repaired drift had been seen before its repair (first sighting → repair; orphans from their suspect record, expired orders from their deadline, other kinds from the scan that found them), from the seatflow_reconcile_drift_age_seconds histogram, all replicas. This is how long customers saw a wrong seat.',
                   [
                     gr.target(q('histogram_quantile(0.5, sum by (kind, le) (rate(seatflow_reconcile_drift_age_seconds_bucket{%(s)s}[$__rate_interval])))'), '{{kind}} p50'),
                     gr.target(q('histogram_quantile(0.95, sum by (kind, le) (rate(seatflow_reconcile_drift_age_seconds_bucket{%(s)s}[$__rate_interval])))'), '{{kind}} p95', 'B'),
                   ],
                   unit='s',
                   steps=[['green', null], ['orange', c.driftAgeObjectiveSeconds]],
                   thresholdLines=true), 12, 8],
    [gr.timeseries('Deferred suspects, by kind',
                   'Orphan suspects waiting out reconcile.orphan_grace (default 120 s) before repair, maximum over replicas. Only orphan_locks and sold_orphans have a grace period.',
                   [gr.target(q('max by (kind) (seatflow_reconcile_deferred{%(s)s})'), '{{kind}}')]), 12, 8],
    [gr.timeseries('Backlog, by kind',
                   'Work left for later runs: drift beyond batch_size or on busy showtimes, plus showtimes beyond scan_limit. Maximum over replicas. A backlog that keeps rising is SeatflowReconcilerBacklogGrowing.',
                   [gr.target(q('max by (kind) (seatflow_reconcile_backlog{%(s)s})'), '{{kind}}')]), 12, 8],
  ],

  local runs = [
    [gr.timeseries('Run duration p50 / p95, by kind',
                   'Wall time of job runs (seatflow_reconcile_run_duration_seconds histogram), all replicas. A p95 near the schedule interval leads to skipped_overlap runs.',
                   [
                     gr.target(q('histogram_quantile(0.5, sum by (kind, le) (rate(seatflow_reconcile_run_duration_seconds_bucket{%(s)s}[$__rate_interval])))'), '{{kind}} p50'),
                     gr.target(q('histogram_quantile(0.95, sum by (kind, le) (rate(seatflow_reconcile_run_duration_seconds_bucket{%(s)s}[$__rate_interval])))'), '{{kind}} p95', 'B'),
                   ],
                   unit='s'), 12, 8],
    [gr.timeseries('Time since last success, by kind',
                   'Seconds since each job last completed a successful run, on the best replica; "never" (off the scale, red) for a job that has run but never succeeded. The lines mark the warning (%s) and critical (%s) thresholds of SeatflowReconcilerJobNotSucceeding. Disabled jobs (no runs) are not drawn.' % [u.humanize(warnS), u.humanize(critS)],
                   [gr.target(sinceSuccess, '{{kind}}')],
                   unit='s',
                   steps=[['green', null], ['orange', warnS], ['red', critS]],
                   thresholdLines=true,
                   mappings=[never]), 12, 8],
    [gr.timeseries('Runs per minute, by outcome',
                   'Job runs per minute by outcome, all jobs and replicas: success, partial (some items failed), failure, skipped_overlap (a fire while the previous run of the job was still going).',
                   [gr.target(q('sum by (outcome) (rate(seatflow_reconcile_runs_total{%(s)s}[$__rate_interval])) * 60'), '{{outcome}}')],
                   unit='opm'), 12, 8],
    [gr.timeseries('Showtimes scanned per second, by kind',
                   'Showtimes scanned per second by each job (orders, for expired_orders), summed over replicas.',
                   [gr.target(q('sum by (kind) (rate(seatflow_reconcile_scanned_total{%(s)s}[$__rate_interval]))'), '{{kind}}')],
                   unit='ops'), 12, 8],
  ],

  local passes = [
    [gr.timeseries('Active process, by shard',
                   'Which process ran the latest seat pass of each shard (seatflow_reconcile_pass_active = 1); the others stand by. One line per shard; a change of instance is a hand-over.',
                   [gr.target(q('max by (shard, instance) (seatflow_reconcile_pass_active{%(s)s}) == 1'), 'shard {{shard}}: {{instance}}')],
                   unit='none',
                   decimals=0,
                   min=0), 12, 8],
    [gr.timeseries('Time since the last completed pass, by shard',
                   'Seconds since any process last completed a seat pass of each shard (max over processes of seatflow_reconcile_pass_last_completed_timestamp_seconds). Orange at one sweep interval (%s), red at %d: SeatflowReconcilerPassStalled.' % [u.humanize(c.sweepIntervalSeconds), passLimit],
                   [gr.target(q('time() - max by (shard) (seatflow_reconcile_pass_last_completed_timestamp_seconds{%(s)s})'), 'shard {{shard}}')],
                   unit='s',
                   steps=[['green', null], ['orange', c.sweepIntervalSeconds], ['red', passLimit]],
                   thresholdLines=true,
                   mappings=[never]), 12, 8],
    [gr.timeseries('Hand-overs per hour, by shard',
                   'Seat passes a process took over from another instance (its pass lease expired or was released: a restart, a rollout, a stuck process), summed over processes. A steady rate means processes keep losing their lease: SeatflowReconcilerPassChangingHands above %s in %s.' % [c.passHandoverThreshold, c.passHandoverWindow],
                   [gr.target(q('sum by (shard) (increase(seatflow_reconcile_pass_handovers_total{%(s)s}[1h]))'), 'shard {{shard}}')],
                   decimals=0), 8, 8],
    [gr.timeseries('Pass overruns per hour',
                   'Seat passes that did not finish before the next fire, per process. See SeatflowReconcilerPassOverrunning.',
                   [gr.target(q('sum by (instance) (increase(seatflow_reconcile_pass_overruns_total{%(s)s}[1h]))'), '{{instance}}')],
                   decimals=0), 8, 8],
    [gr.timeseries('Pace: seat-hash reads per second',
                   'The current pace limit of seat-hash reads per process (0 = unpaced) and how often pacing backed off, by the store whose latency rose (back-offs per minute; the same axis).',
                   [
                     gr.target(q('max by (instance) (seatflow_reconcile_pace_hashes_per_second{%(s)s})'), '{{instance}} limit'),
                     gr.target(q('sum by (instance, store) (rate(seatflow_reconcile_pace_backoffs_total{%(s)s}[$__rate_interval])) * 60'), '{{instance}} {{store}} back-offs/min', 'B'),
                   ],
                   unit='short'), 8, 8],
    [gr.timeseries('Pass: showtimes swept per second, and the shards a pass would fit with',
                   'Per shard, the last pass of the process running it: showtimes it swept per second, and the sharding.total at which a pass of each shard would take at most 80 % of the sweep interval at that pace (GET /status: pass.shards.N.fit, with the interval that would fit). Quoted by SeatflowReconcilerPassOverrunning.',
                   [
                     gr.target(q('max by (shard) (seatflow_reconcile_pass_showtimes_per_second{%(s)s})'), 'shard {{shard}} showtimes/s'),
                     gr.target(q('max by (shard) (seatflow_reconcile_pass_shards_to_fit{%(s)s})'), 'shard {{shard}} shards to fit', 'B'),
                   ],
                   unit='short'), 24, 8],
  ],

  local errors = [
    [gr.timeseries('Errors per minute, by stage',
                   'Errors counted after retries, by stage: mysql, redis, lock (taking or keeping a showtime lease), audit (a repair without its audit row), invalid_data (bad data left alone). See SeatflowReconcilerErrors and SeatflowReconcilerInvalidData.',
                   [gr.target(q('sum by (stage) (rate(seatflow_reconcile_errors_total{%(s)s}[$__rate_interval])) * 60'), '{{stage}}')],
                   unit='opm'), 8, 8],
    [gr.timeseries('Showtime lease contention: busy showtimes per minute, by kind',
                   'Showtimes skipped because another reconciler held their showtime lease ({prefix}reconcile:lock:{S}; the per-showtime mutex of the spec). Expected in small numbers with several replicas; they are retried next run and counted in the backlog.',
                   [gr.target(q('sum by (kind) (rate(seatflow_reconcile_mutex_busy_total{%(s)s}[$__rate_interval])) * 60'), '{{kind}}')],
                   unit='opm'), 8, 8],
  ] + (if daemon then [
         [gr.timeseries('Dependency health',
                        "1 when a reconciler's last dependency probe (every 10 seconds, and on every GET /readyz) reached the dependency, 0 when it failed or took over 2 seconds; per replica.",
                        [gr.target(q('max by (instance, dependency) (seatflow_reconciler_dependency_up{%(s)s, instance!=""})'), '{{instance}} {{dependency}}')],
                        unit='none',
                        mappings=gr.valueMap({ '0': ['DOWN', 'red'], '1': ['UP', 'green'] }),
                        decimals=0,
                        min=0), 8, 8],
       ] else []) + [
    [gr.timeseries('Stuck showtime leases (no expiry), by kind',
                   'Showtimes whose showtime lease ({prefix}reconcile:lock:{S}) is held by someone else and has no expiry, met by the last run. They are skipped on every run until an operator looks: see the runbook, SeatflowReconcilerStuckLease. The reconciler never deletes them.',
                   [gr.target(q('max by (kind) (seatflow_reconcile_stuck_leases{%(s)s})'), '{{kind}}')]), 8, 8],
  ],

  local process = [
    [gr.timeseries('Resident memory, by process',
                   'Resident set size of each reconciler process (process_resident_memory_bytes). Flat over time: memory is bounded by two chunks and a capped template cache.',
                   [gr.target(q('max by (instance) (process_resident_memory_bytes{%(s)s})'), '{{instance}}')],
                   unit='bytes'), 8, 8],
    [gr.timeseries('CPU, by process',
                   'CPU time used per second by each reconciler process (rate of process_cpu_seconds_total): 1 = one core.',
                   [gr.target(q('sum by (instance) (rate(process_cpu_seconds_total{%(s)s}[$__rate_interval]))'), '{{instance}}')],
                   unit='percentunit'), 8, 8],
    [gr.timeseries('File descriptors in use, by process',
                   'process_open_fds over process_max_fds of each reconciler process.',
                   [gr.target(q('max by (instance) (process_open_fds{%(s)s}) / max by (instance) (process_max_fds{%(s)s})'), '{{instance}}')],
                   unit='percentunit'), 4, 8],
    [gr.timeseries('Uptime, by process',
                   'Seconds since each reconciler process started (process_start_time_seconds): a drop is a restart (a rollout, a crash, a rotated TLS file).',
                   [gr.target(q('time() - max by (instance) (process_start_time_seconds{%(s)s})'), '{{instance}}')],
                   unit='s'), 4, 8],
  ],

  local rows = [
                 [gr.row('Overview'), overview],
                 [gr.row('Repairs and drift'), repairs],
                 [gr.row('Runs'), runs],
               ] + (if daemon then [[gr.row('Seat passes and pacing'), passes]] else [])
               + [[gr.row(if daemon then 'Errors, contention and dependencies' else 'Errors and contention'), errors]]
               + (if daemon then [[gr.row('Process'), process]] else []),

  local file = if daemon then 'seatflow-reconciler.json' else 'seatflow-reconciler-cronjob.json',

  grafanaDashboards+:: {
    [file]: {
      __requires: [
        { type: 'grafana', id: 'grafana', name: 'Grafana', version: '10.4.0' },
        { type: 'datasource', id: 'prometheus', name: 'Prometheus', version: '1.0.0' },
        { type: 'panel', id: 'stat', name: 'Stat', version: '' },
        { type: 'panel', id: 'timeseries', name: 'Time series', version: '' },
      ],
      id: null,
      uid: c.dashboardUid,
      title: c.dashboardTitle,
      description: "Seat inventory reconciliation between seatflow's Redis seat hashes and MySQL orders: repairs, drift and its age, runs, errors%s. Generated from monitoring/ (jsonnet mixin); alerts: deploy/prometheus/; runbook: deploy/prometheus/runbook.md." % (if daemon then ', seat passes, processes' else ' (CronJob mode: pushed `once` runs)'),
      tags: c.dashboardTags,
      timezone: c.dashboardTimezone,
      weekStart: '',
      schemaVersion: 39,
      version: 1,
      editable: true,
      graphTooltip: 1,
      liveNow: false,
      fiscalYearStartMonth: 0,
      refresh: c.dashboardRefresh,
      time: { from: 'now-6h', to: 'now' },
      timepicker: { refresh_intervals: ['30s', '1m', '5m', '15m', '1h'] },
      links: [{
        title: 'Runbook',
        type: 'link',
        url: c.runbookURLPattern % '',
        targetBlank: true,
        icon: 'doc',
        tooltip: 'What each alert means and what to do',
        asDropdown: false,
        includeVars: false,
        keepTime: false,
        tags: [],
      }],
      annotations: { list: [{
        builtIn: 1,
        datasource: { type: 'grafana', uid: '-- Grafana --' },
        enable: true,
        hide: true,
        iconColor: 'rgba(0, 211, 255, 1)',
        name: 'Annotations & Alerts',
        type: 'dashboard',
      }] },
      templating: { list: [
        {
          name: 'datasource',
          label: 'Data source',
          type: 'datasource',
          query: 'prometheus',
          current: {},
          hide: 0,
          includeAll: false,
          multi: false,
          options: [],
          refresh: 1,
          regex: '',
          skipUrlSync: false,
        },
      ] + (if multi then [
             gr.queryVariable(c.clusterLabel, 'Cluster', 'label_values(seatflow_reconciler_build_info{%s}, %s)' % [c.selector, c.clusterLabel]),
           ] else []) + [
        gr.queryVariable('namespace', 'Namespace', 'label_values(seatflow_reconciler_build_info{%s}, namespace)' % std.join(', ', [c.selector] + (if multi then ['%s=~"$cluster"' % c.clusterLabel] else []))),
        gr.queryVariable('instance', 'Instance', 'label_values(seatflow_reconciler_build_info{%s, namespace=~"$namespace"}, instance)' % std.join(', ', [c.selector] + (if multi then ['%s=~"$cluster"' % c.clusterLabel] else []))),
      ] },
      panels: gr.layout(rows),
    },
  },
}
