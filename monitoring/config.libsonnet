// The mixin's knobs. Override any of them from your own jsonnet:
//
//   (import 'seatflow-reconciler/mixin.libsonnet') + {
//     _config+:: { selector: 'job="reconciler", cluster="prod"', repairSpikePerMinute: 50 },
//   }
//
// Every rendered file in this repository (monitoring/render.jsonnet) uses
// these defaults, with `mode: 'cronjob'` for the CronJob overlay's files.
{
  _config+:: {
    // 'daemon' (`run`, scraped: Deployment or sidecar) or 'cronjob' (`once`,
    // pushed to a Pushgateway). The CronJob flavour has no `up` to watch and no
    // seat passes; its only health signal is the age of the pushed
    // last-success times, and the absence of the pushed series.
    mode: 'daemon',

    // PromQL matchers (without braces) that select the reconciler's own series
    // and its `up`. Pushed CronJob series carry job="seatflow-reconciler" (the
    // Pushgateway grouping key, scraped with honor_labels: true).
    selector: if self.mode == 'cronjob' then 'job="seatflow-reconciler"' else 'job=~".*seatflow-reconciler.*"',

    // Labels that tell one reconciler deployment from another: alerts
    // aggregate replicas `by` these (plus `kind`, `stage` or `shard`).
    // prometheus-operator adds `namespace`; Prometheus adds `job`.
    groupLabels: (if self.showMultiCluster then [self.clusterLabel] else []) + ['namespace', 'job'],
    // Several clusters in one Prometheus/Thanos: set showMultiCluster: true and
    // the dashboard gets a cluster variable and alerts keep the label.
    clusterLabel: 'cluster',
    showMultiCluster: false,

    runbookURLPattern: 'https://github.com/seatflow/seatflow-reconciler/blob/main/docs/troubleshooting.md#%s',

    // ---------------------------------------------------------------- thresholds
    // A scrape target down (daemon only).
    downFor: '5m',
    // No target of a deployment up at all (daemon only): every scrape fails,
    // or the targets are gone. Critical, so far quicker than MetricsAbsent
    // (absentWindow + absentFor). Fires when no scrape within noneUpWindow
    // was up, for noneUpFor more (3 minutes in all): longer than a pod
    // restart, short enough that drift does not pile up; a single failed
    // scrape never even makes it pending. A deployment counts while it had a
    // target within noneUpLookback; once the last target has been gone that
    // long, MetricsAbsent (firing since absentWindow + absentFor) pages alone.
    noneUpWindow: '2m',
    noneUpFor: '1m',
    noneUpLookback: '1h',
    // No reconciler series at all (everything deleted, scaled to zero, a
    // ServiceMonitor that selects nothing, a Pushgateway that lost its data).
    absentFor: '10m',
    absentWindow: '10m',
    // A job without a successful run for this long (seconds), for `for`.
    jobNotSucceedingWarningSeconds: 20 * 60,
    jobNotSucceedingWarningFor: '10m',
    jobNotSucceedingCriticalSeconds: 45 * 60,
    jobNotSucceedingCriticalFor: '15m',
    // Repairs of one kind per minute, averaged over 10 minutes.
    repairSpikePerMinute: 10,
    driftPersistsFor: '15m',
    errorsFor: '15m',
    invalidDataFor: '30m',
    backlogGrowingFor: '30m',
    stuckLeaseFor: '15m',
    // A schema deviation that holds repairs back (rule 17): it stays until
    // someone alters the table, so one pass's worth of confirmation is enough.
    contractDeviationFor: '10m',
    // A refused permission (rule 18) pages at once and stays while refusals
    // keep coming within this window.
    permissionDeniedWindow: '15m',
    // Passes that read only the primary although a replica is configured.
    replicaNotReadWindow: '30m',
    replicaNotReadFor: '30m',
    // Drift age SLO: at least driftAgeObjectiveRatio of the repairs of one
    // kind fix drift younger than driftAgeObjectiveSeconds (first sighting →
    // repair), over driftAgeWindow. driftAgeObjectiveSeconds must be a bucket
    // boundary of seatflow_reconcile_drift_age_seconds (see src/metrics/mod.rs).
    driftAgeObjectiveSeconds: 300,
    driftAgeObjectiveRatio: 0.99,
    driftAgeWindow: '1h',
    driftAgeFor: '15m',
    // Volume guards: the ratio means nothing over a handful of repairs (one
    // late repair out of three is 33 %, far over any budget). The alert needs
    // at least driftAgeMinRepairs repairs of the kind in driftAgeWindow, and
    // at least driftAgeMinLateRepairs of them late: a single late repair never
    // fires, whatever the volume. Below the guards lateness shows on the
    // dashboard only; a reconciler that stops repairing is JobNotSucceeding,
    // DriftPersists or PassStalled.
    driftAgeMinRepairs: 10,
    driftAgeMinLateRepairs: 3,
    // The daemon's seat sweep: one pass per shard every sweep interval. A
    // shard without a completed pass for passStalledIntervals intervals
    // alerts; the interval is the daemon's own
    // (seatflow_reconcile_pass_interval_seconds), sweepIntervalSeconds only
    // for binaries that do not export it (and the dashboard's colours).
    sweepIntervalSeconds: 60,
    passStalledIntervals: 2,
    passStalledFor: '5m',
    // A shard whose pass no process holds (seatflow_reconcile_pass_active 0
    // in every process throughout passWithoutHolderWindow) for
    // passWithoutHolderFor: fires within 5 minutes of the last holder,
    // whatever the schedule (daemon only). A hand-over (a lease's TTL, 15 s
    // by default) never lasts the window. Not before some process has been
    // up for passWithoutHolderStartup (a rollout's first claims).
    passWithoutHolderWindow: '1m',
    passWithoutHolderFor: '2m',
    passWithoutHolderStartup: '2m',
    // Passes that did not finish before the next fire, within passOverrunWindow.
    passOverrunThreshold: 3,
    passOverrunWindow: '30m',
    passOverrunFor: '15m',
    // A shard's pass taken over by another process more than
    // passHandoverThreshold times in passHandoverWindow (daemon only). The
    // process that ran the last pass goes first, so the pass changes hands
    // only when that process is gone: a rollout of two replicas hands each
    // shard over two or three times; a steady stream means processes keep
    // restarting, losing their pass lease or firing late, or another
    // reconciler (a CronJob, a manual `once`) keeps taking the pass.
    passHandoverThreshold: 6,
    passHandoverWindow: '1h',
    passHandoverFor: '15m',
    // Redis keyspace notifications that stopped arriving (a probe went
    // unanswered after they had been on) and are still off (daemon only).
    eventsStoppedWindow: '30m',
    eventsStoppedFor: '5m',
    // Passes repaired more than changesMissedThreshold seats of the kinds
    // Redis events can see (orphan locks, missing hashes) in
    // changesMissedWindow while events were on with no gap: the checks
    // between passes miss what they should catch (daemon only).
    changesMissedThreshold: 10,
    changesMissedWindow: '1h',
    changesMissedFor: '15m',
    // Dry run (seatflow_reconciler_dry_run 1) for this long: drift is found
    // and reported, nothing is repaired. Long enough for a deliberate dry-run
    // rollout to be looked at and switched off.
    dryRunFor: '1h',
    // A store (MySQL or Redis) that a daemon's dependency probe has not
    // reached (daemon only): no successful probe scraped within
    // storeUnreachableWindow, for storeUnreachableFor more (5 minutes in
    // all; one slow probe never makes it pending). The daemon probes both
    // stores every 10 seconds in the background and on every GET /readyz
    // (2-second timeout); the CronJob pushes no probe result (its unreachable
    // store is exit 3 at start, then JobNotSucceeding).
    storeUnreachableWindow: '4m',
    storeUnreachableFor: '1m',

    // ---------------------------------------------------------------- dashboard
    dashboardUid: if self.mode == 'cronjob' then 'seatflow-reconciler-cronjob' else 'seatflow-reconciler',
    dashboardTitle: if self.mode == 'cronjob' then 'seatflow-reconciler (CronJob)' else 'seatflow-reconciler',
    dashboardTags: ['seatflow', 'seatflow-reconciler'],
    dashboardRefresh: '1m',
    dashboardTimezone: 'utc',
  },
}
