// Alert rules. Conventions (monitoring-mixin): every alert is named
// SeatflowReconciler*, has `severity` critical or warning, a `summary`, a
// templated `description` and a `runbook_url` to its section of
// docs/troubleshooting.md (its "Alerts").
//
// Labels: the binary exports `kind` (the job, snake_case), `stage`, `outcome`,
// `shard`; Prometheus adds `job` and `instance`, prometheus-operator
// `namespace`. Alerts aggregate over replicas `by (<groupLabels>, kind)`:
// gauges with max (the replica running the pass has the current values, a
// standby shows 0), counters with sum (each repair is made by exactly one
// replica). Where a label does not exist (no
// `namespace` outside Kubernetes) `by` simply ignores it.
local u = import 'lib/util.libsonnet';

{
  local c = $._config,
  local g = std.join(', ', c.groupLabels),
  local where = u.where(c.groupLabels),
  local runbook(name) = c.runbookURLPattern % std.asciiLower(name),
  local alert(name, severity, expr, forDuration, summary, description) = {
    alert: name,
    expr: expr,
    'for': forDuration,
    labels: { severity: severity },
    annotations: {
      summary: summary,
      description: description,
      runbook_url: runbook(name),
    },
  },
  local daemon = c.mode == 'daemon',
  // A sentence quoting the largest value of a pass gauge in the alert's
  // group (text % the value), or nothing where there is none.
  local lastPass(metric, text) =
    local match = std.join(', ', [l + '=%q' for l in c.groupLabels]);
    local args = std.join(' ', ['$labels.' + l for l in c.groupLabels]);
    '{{ with printf "max(' + metric + '{' + match + '})" ' + args + ' | query }}'
    + (text % '{{ . | first | value | printf "%.0f" }}')
    + '{{ end }}',
  // The jobs of the shared seat pass (`kind` values); expired_orders has its
  // own schedule.
  local seatJobs = ['paid_seats', 'missing_hashes', 'orphan_locks', 'sold_orphans'],

  local notSucceeding(severity, seconds, forDuration, consequence) = alert(
    'SeatflowReconcilerJobNotSucceeding',
    severity,
    |||
      (
        time() - max by (%(g)s, kind) (seatflow_reconcile_last_success_timestamp_seconds{%(sel)s})
      ) > %(s)d
      and on (%(g)s, kind)
      sum by (%(g)s, kind) (seatflow_reconcile_runs_total{%(sel)s}) > 0
    ||| % { g: g, sel: c.selector, s: seconds },
    forDuration,
    'A seatflow-reconciler job has not succeeded for %s.' % u.humanize(seconds + u.seconds(forDuration)),
    'The {{ $labels.kind }} job (%s) last completed a successful run {{ $value | humanizeDuration }} ago (decades: never since the process started). %s' % [where, consequence],
  ),

  prometheusAlerts+:: {
    groups+: [
      {
        name: 'seatflow-reconciler',
        rules: (if daemon then [
                  alert(
                    'SeatflowReconcilerDown',
                    'warning',
                    'up{%s} == 0' % c.selector,
                    c.downFor,
                    'A seatflow-reconciler target is down.',
                    'Prometheus has failed to scrape seatflow-reconciler at {{ $labels.instance }} (job {{ $labels.job }}) for %s: this replica detects and repairs no seat inventory drift.' % u.humanize(u.seconds(c.downFor)),
                  ),
                  // No target of a deployment is up: every one is down
                  // (crash loop, not scrapable) or gone (scaled to zero,
                  // deleted: its `up` series ended). A deployment is one
                  // that had a target within noneUpLookback, so a vanished
                  // one still counts; `unless` leaves exactly the
                  // deployments without a successful scrape (`up == 1`)
                  // within noneUpWindow, so one failed scrape of a single
                  // replica does not even make it pending. Per deployment,
                  // unlike absent(), which would stay silent while another
                  // deployment matching the selector is up.
                  alert(
                    'SeatflowReconcilerNoneUp',
                    'critical',
                    |||
                      count by (%(g)s) (max_over_time(up{%(sel)s}[%(lookback)s]))
                      unless on (%(g)s)
                      count by (%(g)s) (max_over_time(up{%(sel)s}[%(w)s]) == 1)
                    ||| % { g: g, sel: c.selector, lookback: c.noneUpLookback, w: c.noneUpWindow },
                    c.noneUpFor,
                    'No seatflow-reconciler target is up.',
                    'No scrape target of %s has been up for %s: every scrape fails (pods crash-looping, not ready, unreachable) or the targets are gone (scaled to zero, deleted). Nothing repairs seat drift, and the alerts on the reconciler\'s own series cannot fire.' % [where, u.humanize(u.seconds(c.noneUpWindow) + u.seconds(c.noneUpFor))],
                  ),
                ] else []) + [
          // No series at all: every other alert here is silent then.
          alert(
            'SeatflowReconcilerMetricsAbsent',
            'critical',
            if daemon
            then 'absent_over_time(seatflow_reconciler_build_info{%s}[%s])' % [c.selector, c.absentWindow]
            else 'absent_over_time(seatflow_reconcile_last_success_timestamp_seconds{%s}[%s])' % [c.selector, c.absentWindow],
            c.absentFor,
            'seatflow-reconciler reports no metrics at all.',
            if daemon
            then 'Prometheus has had no seatflow_reconciler_build_info series matching {%s} for %s: no reconciler is running or none is scraped (Deployment deleted or scaled to zero, a ServiceMonitor or PodMonitor that selects nothing). Nothing repairs seat drift and no other seatflow-reconciler alert can fire.' % [c.selector, u.humanize(u.seconds(c.absentWindow) + u.seconds(c.absentFor))]
            else 'Prometheus has had no pushed seatflow_reconcile_last_success_timestamp_seconds series matching {%s} for %s: the CronJob never pushed, the Pushgateway lost its data, or Prometheus does not scrape the Pushgateway. Nothing shows whether seat drift is repaired.' % [c.selector, u.humanize(u.seconds(c.absentWindow) + u.seconds(c.absentFor))],
          ),

          // A job has not completed a successful run for too long. Guarded by
          // "the job has run at all" (runs_total > 0, any outcome), so a job
          // disabled in the configuration, whose last-success gauge stays 0,
          // never alerts. A job that has never succeeded (gauge 0) makes the
          // left side huge: then `for` alone decides. In CronJob mode this is
          // the staleness of the pushed last-success time: a CronJob that
          // stopped running leaves its last push in the Pushgateway.
          notSucceeding('warning', c.jobNotSucceedingWarningSeconds, c.jobNotSucceedingWarningFor, 'Its drift is not being repaired.'),
          notSucceeding('critical', c.jobNotSucceedingCriticalSeconds, c.jobNotSucceedingCriticalFor, 'Seats held by crashed or abandoned checkouts stay unsellable until it runs again.'),

          // Repairs of one kind, summed over replicas, averaged over 10 minutes.
          alert(
            'SeatflowReconcilerRepairSpike',
            'warning',
            |||
              sum by (%(g)s, kind) (rate(seatflow_reconcile_fixes_total{%(sel)s}[10m])) * 60
              > %(t)s
            ||| % { g: g, sel: c.selector, t: c.repairSpikePerMinute },
            '5m',
            'seatflow-reconciler is repairing unusually many {{ $labels.kind }} items.',
            'The {{ $labels.kind }} job (%s) has been repairing {{ $value | printf "%%.1f" }} items per minute over the last 10 minutes, above the configured threshold. Something upstream (seatflow, its expiry messages, Redis) is creating drift.' % where,
          ),

          // Drift the job could act on (found minus suspects still in their
          // grace period) reported by every scan of the window.
          alert(
            'SeatflowReconcilerDriftPersists',
            'warning',
            |||
              max by (%(g)s, kind) (
                min_over_time(seatflow_reconcile_drift{%(sel)s}[15m])
                - max_over_time(seatflow_reconcile_deferred{%(sel)s}[15m])
              ) > 0
            ||| % { g: g, sel: c.selector },
            c.driftPersistsFor,
            'seatflow-reconciler finds the same {{ $labels.kind }} drift run after run.',
            'Every {{ $labels.kind }} scan (%s) of the last 30 minutes found at least {{ $value }} drifted items beyond those waiting out the grace period: they are not being repaired (dry run, busy showtime lease, repairs failing, or a backlog).' % where,
          ),

          // How late drift is repaired: an SLO on first sighting → repair.
          // Counted with increase() over the window: late share over the
          // budget, and (volume guards) at least driftAgeMinRepairs repairs
          // and driftAgeMinLateRepairs late ones, so one late repair in a
          // quiet hour never fires. Once the late repairs leave the window the
          // guards fail and the alert clears, whether or not repairs continue
          // (0/0 is NaN, never over the budget). In CronJob mode the pushed
          // histogram must continue across pushes, as the counters do: then
          // increase() works on the Pushgateway's series as on a daemon's, and
          // a CronJob that stops pushing leaves constant series (no increase,
          // no alert).
          alert(
            'SeatflowReconcilerDriftRepairedLate',
            'warning',
            |||
              (
                1 - (
                  sum by (%(g)s, kind) (increase(seatflow_reconcile_drift_age_seconds_bucket{%(sel)s, le=~"%(le)s"}[%(w)s]))
                  /
                  sum by (%(g)s, kind) (increase(seatflow_reconcile_drift_age_seconds_count{%(sel)s}[%(w)s]))
                )
              ) > %(budget)s
              and on (%(g)s, kind)
              sum by (%(g)s, kind) (increase(seatflow_reconcile_drift_age_seconds_count{%(sel)s}[%(w)s])) >= %(minRepairs)d
              and on (%(g)s, kind)
              (
                sum by (%(g)s, kind) (increase(seatflow_reconcile_drift_age_seconds_count{%(sel)s}[%(w)s]))
                - sum by (%(g)s, kind) (increase(seatflow_reconcile_drift_age_seconds_bucket{%(sel)s, le=~"%(le)s"}[%(w)s]))
              ) >= %(minLate)d
            ||| % {
              g: g,
              sel: c.selector,
              le: u.leRegex(c.driftAgeObjectiveSeconds),
              w: c.driftAgeWindow,
              budget: u.round6(1 - c.driftAgeObjectiveRatio),
              minRepairs: c.driftAgeMinRepairs,
              minLate: c.driftAgeMinLateRepairs,
            },
            c.driftAgeFor,
            'seatflow-reconciler repairs {{ $labels.kind }} drift too late.',
            "Of the {{ $labels.kind }} repairs (%s) over the last %s, {{ $value | humanizePercentage }} fixed drift first seen more than %s before, above the objective's budget of %s: customers see wrong seats for longer than promised." % [where, c.driftAgeWindow, u.humanize(c.driftAgeObjectiveSeconds), u.percent(1 - c.driftAgeObjectiveRatio)],
          ),

          // Dry run left on. Every process exports the gauge (set from the
          // configuration at start and by every run); the CronJob pushes it
          // once per run in its own group (no `kind`), so it tells the last
          // run's mode. Counted per deployment: the value is the number of
          // processes (or pushes) in dry run.
          alert(
            'SeatflowReconcilerDryRunLeftOn',
            'warning',
            |||
              count by (%(g)s) (seatflow_reconciler_dry_run{%(sel)s} == 1)
            ||| % { g: g, sel: c.selector },
            c.dryRunFor,
            'seatflow-reconciler has been in dry run for over %s.' % u.humanize(u.seconds(c.dryRunFor)),
            if daemon
            then 'seatflow-reconciler (%s) has been running in dry run (reconcile.dry_run) for over %s, on {{ $value | printf "%%.0f" }} of its processes: they find and report drift but repair none. A dry-run rollout left on?' % [where, u.humanize(u.seconds(c.dryRunFor))]
            else 'The runs of the seatflow-reconciler CronJob (%s) have pushed dry run (reconcile.dry_run or --dry-run) for over %s: they find and report drift but repair none. A dry-run rollout left on?' % [where, u.humanize(u.seconds(c.dryRunFor))],
          ),

          alert(
            'SeatflowReconcilerErrors',
            'warning',
            |||
              sum by (%(g)s, stage) (
                rate(seatflow_reconcile_errors_total{%(sel)s, stage!="invalid_data"}[5m])
              ) * 60 > 0
            ||| % { g: g, sel: c.selector },
            c.errorsFor,
            'seatflow-reconciler keeps failing at the {{ $labels.stage }} stage.',
            'seatflow-reconciler (%s) has been counting {{ $labels.stage }} errors (after retries) for %s, now {{ $value | printf "%%.2f" }} per minute. Runs end partial or failed, and affected showtimes are skipped.' % [where, u.humanize(u.seconds(c.errorsFor))],
          ),

          alert(
            'SeatflowReconcilerInvalidData',
            'warning',
            |||
              sum by (%(g)s, kind) (
                rate(seatflow_reconcile_errors_total{%(sel)s, stage="invalid_data"}[15m])
              ) > 0
            ||| % { g: g, sel: c.selector },
            c.invalidDataFor,
            'seatflow-reconciler keeps finding invalid {{ $labels.kind }} data it cannot repair.',
            'The {{ $labels.kind }} job (%s) has been reporting invalid data for %s. It leaves such data alone; the seats concerned may show the wrong state until a person fixes them.' % [where, u.humanize(u.seconds(c.invalidDataFor))],
          ),

          alert(
            'SeatflowReconcilerBacklogGrowing',
            'warning',
            |||
              max by (%(g)s, kind) (deriv(seatflow_reconcile_backlog{%(sel)s}[30m])) * 3600 > 0
              and on (%(g)s, kind)
              max by (%(g)s, kind) (seatflow_reconcile_backlog{%(sel)s}) > 0
            ||| % { g: g, sel: c.selector },
            c.backlogGrowingFor,
            'The seatflow-reconciler {{ $labels.kind }} backlog keeps growing.',
            'The {{ $labels.kind }} backlog (%s) has been growing for an hour, by {{ $value | printf "%%.0f" }} items per hour over the last 30 minutes: runs are limited by batch_size or scan_limit, or showtimes are skipped as busy.' % where,
          ),

          // Per deviation (its table, column and kind: the family's `kind`
          // is the deviation's, not a job's). Max over replicas: every one
          // reads the same schema; one that has not read it yet shows none.
          alert(
            'SeatflowReconcilerContractDeviation',
            'warning',
            |||
              max by (%(g)s, table, column, kind) (seatflow_reconcile_contract_deviations{%(sel)s}) == 1
            ||| % { g: g, sel: c.selector },
            c.contractDeviationFor,
            'The seatflow schema deviates from the contract and holds repairs back.',
            'seatflow-reconciler (%s) reads {{ $labels.table }}.{{ $labels.column }} with a deviation from the contract ({{ $labels.kind }}) that holds repairs back: seats it may touch are not lowered (or not written at all, or expired orders not cancelled) until the schema is fixed. The fix is in the logs, `/status` (contract) and `check-config`.' % where,
          ),

          alert(
            'SeatflowReconcilerStuckLease',
            'warning',
            |||
              max by (%(g)s, kind) (seatflow_reconcile_stuck_leases{%(sel)s}) > 0
            ||| % { g: g, sel: c.selector },
            c.stuckLeaseFor,
            'seatflow-reconciler {{ $labels.kind }} meets showtime leases that never expire.',
            'The {{ $labels.kind }} job (%s) has been skipping {{ $value | printf "%%.0f" }} showtimes for %s because their showtime lease has no expiry and belongs to someone else. Their drift is not repaired until an operator looks.' % [where, u.humanize(u.seconds(c.stuckLeaseFor))],
          ),
        ] + (if daemon then [
               // The daemon's shared seat pass, per shard: the newest pass by
               // any process is too old. Guarded by "some process has been up
               // for that long", so a rollout (every process new, gauges 0)
               // does not page; and by "the seat jobs have run at all" (any
               // outcome, skipped_overlap included, since the processes
               // started), so a daemon whose seat jobs are all disabled, whose
               // pass timestamps stay 0 (older binaries export them anyway),
               // never pages. A timestamp of 0 pages only while seat passes are
               // being attempted: failing, or hung (the next fires count
               // skipped_overlap).
               // The interval is the daemon's own cadence in force
               // (seatflow_reconcile_pass_interval_seconds: pass.schedule =
               // "auto" is a minute, or 20 with both change sources, and a
               // minute again while either is down), the shortest any
               // replica reports (the active one knows a source is down),
               // else sweepIntervalSeconds (binaries before it).
               local limit = |||
                 (
                   %(n)d * min by (%(g)s) (seatflow_reconcile_pass_interval_seconds{%(sel)s} > 0)
                   or
                   %(fallback)d + 0 * max by (%(g)s) (process_start_time_seconds{%(sel)s})
                 )
               ||| % { g: g, sel: c.selector, n: c.passStalledIntervals, fallback: c.passStalledIntervals * c.sweepIntervalSeconds };
               alert(
                 'SeatflowReconcilerPassStalled',
                 'critical',
                 |||
                   (
                     time() - max by (%(g)s, shard) (seatflow_reconcile_pass_last_completed_timestamp_seconds{%(sel)s})
                   ) > on (%(g)s) group_left ()
                   %(limit)s
                   and on (%(g)s)
                   max by (%(g)s) (time() - process_start_time_seconds{%(sel)s}) > on (%(g)s)
                   %(limit)s
                   and on (%(g)s)
                   sum by (%(g)s) (seatflow_reconcile_runs_total{%(sel)s, kind=~"%(seat)s"}) > 0
                 ||| % { g: g, sel: c.selector, limit: std.rstripChars(limit, '\n'), seat: std.join('|', seatJobs) },
                 c.passStalledFor,
                 'seatflow-reconciler shard {{ $labels.shard }} has no completed seat pass.',
                 'No process of %s has completed a seat pass of shard {{ $labels.shard }} for {{ $value | humanizeDuration }} (more than %d sweep intervals; decades: none since the processes started): seat drift in that shard is not being found or repaired.' % [where, c.passStalledIntervals],
               ),
               // Rule 19: a shard whose pass nobody holds (a claim failing:
               // Redis away, a refused permission; a lease without expiry;
               // every process of the shard gone). The holder keeps its own
               // shard's pass lease between passes and shows 1; a standby
               // shows 0, so the max over processes is 0 only when nobody
               // holds it. Seen within the window whatever the schedule
               // (PassStalled counts in sweep intervals: 40 minutes with
               // both change sources).
               alert(
                 'SeatflowReconcilerPassWithoutHolder',
                 'critical',
                 |||
                   max by (%(g)s, shard) (max_over_time(seatflow_reconcile_pass_active{%(sel)s}[%(w)s])) == 0
                   and on (%(g)s)
                   max by (%(g)s) (time() - process_start_time_seconds{%(sel)s}) > %(startup)d
                 ||| % { g: g, sel: c.selector, w: c.passWithoutHolderWindow, startup: u.seconds(c.passWithoutHolderStartup) },
                 c.passWithoutHolderFor,
                 'The seatflow-reconciler pass of shard {{ $labels.shard }} has no holder.',
                 'No process of %s has held the seat pass of shard {{ $labels.shard }} for %s (seatflow_reconcile_pass_active is 0 in every one): its changes are not checked and its passes run only when another shard\'s process takes one over at a fire, so drift in it waits. GET /readyz on any process says why (pass.why: the claim\'s error, such as Redis unreachable or a refused permission, or a pass lease without expiry).' % [where, u.humanize(u.seconds(c.passWithoutHolderWindow) + u.seconds(c.passWithoutHolderFor))],
               ),
               // A store the daemon cannot reach. seatflow_reconciler_dependency_up
               // is the last dependency probe's result: SELECT 1 through the
               // MySQL pool and PING on the Redis connection, each within 2 s,
               // every 10 s in the background and on every GET /readyz, so it
               // is current whether or not anything polls /readyz. A process
               // counts when none of its probes scraped within the window
               // succeeded (so one slow probe, or the 0 a process shows until
               // its first probe, never even makes the alert pending).
               // Counted per deployment and store, the value is
               // the number of processes that cannot reach it: one replica
               // cut off (its node, an egress rule) alerts as well as a store
               // that is down. The runs' own errors
               // (seatflow_reconcile_errors_total{stage="mysql"|"redis"}) are
               // not a second signal here: they come after retries, only while
               // a run touches the store, and SeatflowReconcilerErrors already
               // reads them. The CronJob does not push the probe (a short
               // process's result, kept by the Pushgateway, would mislead).
               alert(
                 'SeatflowReconcilerStoreUnreachable',
                 'warning',
                 |||
                   count by (%(g)s, dependency) (max_over_time(seatflow_reconciler_dependency_up{%(sel)s}[%(w)s]) == 0)
                 ||| % { g: g, sel: c.selector, w: c.storeUnreachableWindow },
                 c.storeUnreachableFor,
                 'seatflow-reconciler cannot reach {{ $labels.dependency }}.',
                 'seatflow-reconciler (%s) has not reached {{ $labels.dependency }} for %s, on {{ $value | printf "%%.0f" }} of its processes (each of its dependency probes, run every 10 seconds and on GET /readyz, failed or took over 2 seconds): their runs fail or end partial, and drift is not repaired.' % [where, u.humanize(u.seconds(c.storeUnreachableWindow) + u.seconds(c.storeUnreachableFor))],
               ),
               alert(
                 'SeatflowReconcilerPassOverrunning',
                 'warning',
                 |||
                   sum by (%(g)s) (increase(seatflow_reconcile_pass_overruns_total{%(sel)s}[%(w)s])) > %(t)s
                 ||| % { g: g, sel: c.selector, w: c.passOverrunWindow, t: c.passOverrunThreshold },
                 c.passOverrunFor,
                 'seatflow-reconciler seat passes do not finish within the sweep interval.',
                 '{{ $value | printf "%%.0f" }} seat passes of %s did not finish before the next fire over the last %s: each hash is read less often than once per interval, so drift waits longer (pacing too slow, Redis or MySQL slow, or too many showtimes for the interval).' % [where, c.passOverrunWindow]
                 + lastPass('seatflow_reconcile_pass_showtimes_per_second', ' The last pass swept %s showtimes a second;')
                 + lastPass('seatflow_reconcile_pass_shards_to_fit', ' at that pace a pass fits with sharding.total = %s (or a longer pass.schedule: GET /status, pass.shards.N.fit).'),
               ),
               // Keyspace notifications were on and stopped (a probe went
               // unanswered), and are still off.
               alert(
                 'SeatflowReconcilerRedisEventsStopped',
                 'warning',
                 |||
                   sum by (%(g)s) (increase(seatflow_reconcile_change_gaps_total{%(sel)s, reason="events_stopped"}[%(w)s])) > 0
                   and on (%(g)s)
                   max by (%(g)s) (seatflow_reconcile_redis_events{%(sel)s, state="off"}) == 1
                 ||| % { g: g, sel: c.selector, w: c.eventsStoppedWindow },
                 c.eventsStoppedFor,
                 'Redis stopped sending the keyspace notifications seatflow-reconciler checks by.',
                 'Redis keyspace notifications stopped arriving for %s within the last %s and are still off (notify-keyspace-events no longer contains Khgxe, in a Redis Cluster on any one primary: a configuration change, or a failover to a server set up differently). Drift is found by the passes alone, up to a sweep interval later.' % [where, c.eventsStoppedWindow],
               ),
               // Passes keep repairing what the checks between passes should
               // have caught first (kinds Redis events can see).
               alert(
                 'SeatflowReconcilerChangesMissed',
                 'warning',
                 |||
                   sum by (%(g)s, kind) (increase(seatflow_reconcile_change_missed_total{%(sel)s, kind=~"orphan_locks|missing_hashes"}[%(w)s])) > %(t)s
                 ||| % { g: g, sel: c.selector, w: c.changesMissedWindow, t: c.changesMissedThreshold },
                 c.changesMissedFor,
                 'seatflow-reconciler passes keep finding {{ $labels.kind }} drift the change-driven checks missed.',
                 'Passes of %s repaired {{ $value | printf "%%.0f" }} {{ $labels.kind }} seats over the last %s (more than %s) while Redis keyspace notifications were on with no gap: the checks between passes did not catch them first (events dropped, a subscriber connection to another server than the one written to, or checks failing).' % [where, c.changesMissedWindow, c.changesMissedThreshold],
               ),
               // The pass keeps changing hands: hand-overs (counted by the
               // process that took the pass over, so summed over processes)
               // per shard over the window.
               alert(
                 'SeatflowReconcilerPassChangingHands',
                 'warning',
                 |||
                   sum by (%(g)s, shard) (increase(seatflow_reconcile_pass_handovers_total{%(sel)s}[%(w)s])) > %(t)s
                 ||| % { g: g, sel: c.selector, w: c.passHandoverWindow, t: c.passHandoverThreshold },
                 c.passHandoverFor,
                 'The seatflow-reconciler pass of shard {{ $labels.shard }} keeps changing hands.',
                 'The seat pass of shard {{ $labels.shard }} (%s) was taken over by another process {{ $value | printf "%%.0f" }} times over the last %s (more than %s): the process running it keeps going away (restarts, a lost or expired pass lease, fires late) or another reconciler keeps taking it. Each hand-over starts a pass up to pass.takeover_after late.' % [where, c.passHandoverWindow, c.passHandoverThreshold],
               ),

               // A store refused an operation for lack of a permission (rule
               // 18): a grant or an ACL rule lost while the daemon runs. The
               // counter is born at the first refusal, so a series that did
               // not exist a window ago counts as well as one that grew.
               alert(
                 'SeatflowReconcilerPermissionDenied',
                 'warning',
                 |||
                   (
                     sum by (%(g)s, store, need) (increase(seatflow_reconcile_permission_denied_total{%(sel)s}[%(w)s])) > 0
                   )
                   or
                   (
                     sum by (%(g)s, store, need) (
                       seatflow_reconcile_permission_denied_total{%(sel)s}
                       unless seatflow_reconcile_permission_denied_total{%(sel)s} offset %(w)s
                     )
                   )
                 ||| % { g: g, sel: c.selector, w: c.permissionDeniedWindow },
                 '0m',
                 'seatflow-reconciler is refused {{ $labels.need }} by {{ $labels.store }}.',
                 '%s is refused `{{ $labels.need }}` ({{ $labels.store }}) over the last %s: the work that needs it fails on every try (repairs, cancels, audit rows or change sources) until the permission is given back. `/status` (permissions) names each refusal with its last error; deploy/README.md gives the full Redis ACL and MySQL grants.' % [where, c.permissionDeniedWindow],
               ),
               // A replica is configured (its series exist) but no chunk
               // read it: the primary carries the bulk reads it was meant
               // to be spared. Never a safety matter: a warning.
               alert(
                 'SeatflowReconcilerReplicaNotRead',
                 'warning',
                 |||
                   sum by (%(g)s) (increase(seatflow_reconcile_bulk_reads_total{%(sel)s, server="primary"}[%(w)s])) > 0
                   unless on (%(g)s)
                   sum by (%(g)s) (increase(seatflow_reconcile_bulk_reads_total{%(sel)s, server="replica"}[%(w)s])) > 0
                 ||| % { g: g, sel: c.selector, w: c.replicaNotReadWindow },
                 c.replicaNotReadFor,
                 'seatflow-reconciler reads its passes from the MySQL primary, not the replica.',
                 'Every chunk of %s over the last %s read the MySQL primary although mysql.replica_url is set: the replica is lagging, stopped, unreachable, denies its lag or is no replica. Repairs go on (from the primary, as without a replica); the primary carries the bulk reads. `/status` (mysql_replica) says why.' % [where, c.replicaNotReadWindow],
               ),
             ] else []),
      },
    ],
  },
}
