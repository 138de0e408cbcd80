//! The daemon's change-driven tasks (`change_state`): the subscriber (Redis
//! keyspace notifications and the probe), the binlog reader (MySQL's
//! commits, when `changes.mysql_binlog` is on), the deadlines read ahead,
//! the worker (checks what is due), and the expediter (a pass after a gap).
//! Above the runner, whose passes and state they use. The binlog reader
//! is in `binlog.rs`.

mod binlog;
mod data_loss;
mod holder;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use crate::config::RedisEvents;
use crate::daemon::change_state::Changes;
use crate::daemon::change_state::events::{
    self, Channels, EventsState, Message, OwnWrites, PROBE_EVERY, Verdict,
};
use crate::daemon::change_state::queue::{CheckBudget, Due, Source};
use crate::daemon::runner::{NotStarted, Runner};
use crate::model::Kind;
use crate::store::redis::Topology;

/// How often the subscriber looks at this replica's role (and judges the probe).
pub(super) const ROLE_EVERY: Duration = Duration::from_secs(1);

/// Waits `wait` before a retry (false: the daemon stops meanwhile), and
/// doubles it for the next, up to [`MAX_RECONNECT_WAIT`].
pub(super) async fn back_off(
    wait: &mut Duration,
    stop: &tokio_util::sync::CancellationToken,
) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(*wait) => {}
        _ = stop.cancelled() => return false,
    }
    *wait = (*wait * 2).min(MAX_RECONNECT_WAIT);
    true
}

/// How long after start a daemon that has run no pass yet starts one (a
/// pass started by hand or by the schedule meanwhile is the first).
const FIRST_PASS_AFTER: Duration = Duration::from_secs(5);

/// Longest wait between two subscription attempts.
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(30);

/// Starts the tasks on the runner's tracker (they end on shutdown).
pub fn spawn(runner: &Arc<Runner>, changes: &Arc<Changes>) {
    let mut tasks = vec![Task::Work, Task::Expedite, Task::KeepPass, Task::DataLoss];
    if runner.ctx.settings.job(Kind::ExpiredOrders).enabled {
        tasks.push(Task::Deadlines);
    }
    if runner.ctx.settings.changes.mysql_binlog {
        tasks.push(Task::Binlog);
    }
    if let Some(every) = runner.ctx.settings.pass.while_uncovered {
        tasks.push(Task::WhileUncovered(every));
    }
    if runner.ctx.settings.changes.redis_events == RedisEvents::Auto {
        tasks.push(Task::Subscribe);
    } else {
        changes.events_are(EventsState::Disabled);
    }
    for task in tasks {
        let (runner, changes) = (Arc::clone(runner), Arc::clone(changes));
        runner.clone().spawn(async move {
            match task {
                Task::Subscribe => subscribe(&runner, &changes).await,
                Task::Work => work(&runner, &changes).await,
                Task::Expedite => expedite(&runner, &changes).await,
                Task::Deadlines => deadlines(&runner, &changes).await,
                Task::Binlog => binlog::binlog(&runner, &changes).await,
                Task::WhileUncovered(every) => while_uncovered(&runner, &changes, every).await,
                Task::KeepPass => holder::keep_pass(&runner, &changes).await,
                Task::DataLoss => data_loss::watch(&runner, &changes).await,
            }
        });
    }
}

#[derive(Clone, Copy)]
enum Task {
    Subscribe,
    Work,
    Expedite,
    Deadlines,
    Binlog,
    WhileUncovered(Duration),
    /// The shard's pass always has a holder, or says why not (`holder.rs`).
    KeepPass,
    /// Redis data loss is a gap (`data_loss.rs`).
    DataLoss,
}

/// While this replica runs its shard's passes: subscribes to the seat
/// hashes' keyspace channels and queues a check of each showtime of the
/// shard whose hash changed; probes once a minute whether the server sends
/// the notifications at all. A lost subscription is a gap; it is made again
/// with a growing wait. A standby holds no subscription (each one costs
/// Redis a copy of every event); it subscribes once a pass makes it the
/// active replica, the pass having covered what came before.
///
/// In Redis Cluster mode a node publishes only its own keys' events: the
/// subscription is one connection per primary (any one lost loses the
/// whole), each primary is probed on a key of its own, and the topology is
/// read again every [`TOPOLOGY_EVERY`]: primaries or slots that moved (a
/// failover, a resharding) are a gap, and the subscription is made again
/// on the new set.
async fn subscribe(runner: &Runner, changes: &Changes) {
    let ctx = &runner.ctx;
    let stop = runner.stopping();
    let shard = ctx.settings.shard();
    let settle = ctx.settings.changes.event_settle;
    let mut wait = Duration::from_secs(1);
    while !stop.is_cancelled() {
        if runner.active_on_own_shard() != Some(true) {
            if runner.active_on_own_shard() == Some(false) {
                changes.events_are(EventsState::Standby);
            }
            tokio::select! {
                _ = tokio::time::sleep(ROLE_EVERY) => {}
                _ = stop.cancelled() => return,
            }
            continue;
        }
        let (topology, channels, stream) = match listen(runner).await {
            Ok(listening) => listening,
            Err(e) => {
                changes.subscription_lost();
                runner.ctx.denials.note(&e);
                tracing::warn!(error = %e, retry_in = ?wait, "could not subscribe to Redis keyspace notifications");
                if !back_off(&mut wait, &stop).await {
                    return;
                }
                continue;
            }
        };
        wait = Duration::from_secs(1);
        let mut stream = stream;
        let mut own = OwnWrites::default();
        let mut probe_tick = tokio::time::interval(PROBE_EVERY);
        let mut judge_tick = tokio::time::interval(ROLE_EVERY);
        let mut topology_tick =
            tokio::time::interval_at(tokio::time::Instant::now() + TOPOLOGY_EVERY, TOPOLOGY_EVERY);
        loop {
            tokio::select! {
                msg = stream.next() => {
                    let Some((channel, event)) = msg else {
                        changes.subscription_lost();
                        changes.gap("connection_lost");
                        tracing::warn!("the Redis keyspace subscription was lost; a pass covers the gap");
                        break;
                    };
                    let message = channels.read(&channel, &event);
                    let ours = own.ours(message);
                    match message {
                        Message::Seat(s) | Message::SeatOther(s) => {
                            if ours {
                                changes.metrics.own_events.inc();
                            } else if shard.covers(s) {
                                changes.ask(s, Instant::now() + settle, Source::Event);
                            }
                            // Counted once asked: whoever reads the count
                            // finds the check in the queue.
                            changes.metrics.events.inc();
                        }
                        Message::Probe { key, hash_event } => {
                            if let Some(v) = changes.probe_seen(key, hash_event) {
                                log_verdict(&v, topology.as_ref());
                            }
                        }
                        Message::OwnWrites { .. } | Message::Ignored => {}
                    }
                }
                _ = probe_tick.tick() => {
                    if ctx.settings.reconcile.dry_run {
                        judge_without_writing(ctx, changes).await;
                        continue;
                    }
                    let keys = channels.probe_keys();
                    changes.probe_sent(Instant::now(), keys.len());
                    if let Err(e) = ctx.redis.write_probe(keys).await {
                        runner.ctx.denials.note(&e);
                        tracing::warn!(error = %e, "could not write the keyspace notification probe");
                    }
                }
                _ = judge_tick.tick() => {
                    // Another replica runs the shard's passes now. (While
                    // this one cannot tell, its lease not renewed, it keeps
                    // listening: the checks wait in the queue.)
                    if runner.active_on_own_shard() == Some(false) {
                        break;
                    }
                    if let Some(v) = changes.probe_judged(Instant::now()) {
                        if matches!(v, Verdict::Stopped { .. }) {
                            changes.gap("events_stopped");
                        }
                        log_verdict(&v, topology.as_ref());
                    }
                }
                _ = topology_tick.tick(), if topology.is_some() => {
                    match ctx.redis.topology().await {
                        Ok(now) if now != topology => {
                            // The events' state stands: the new
                            // subscription's first probe (at once) judges it.
                            changes.gap("topology_changed");
                            tracing::info!(
                                primaries = %primaries(now.as_ref()),
                                "the Redis Cluster's primaries or slots changed; subscribing again, and a pass covers the gap"
                            );
                            break;
                        }
                        Ok(_) => {}
                        // A change under way, or a node away: read again
                        // next time (a lost node also ends its stream).
                        Err(e) => tracing::debug!(error = %e, "could not read the Redis Cluster's topology"),
                    }
                }
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Rule 5: a dry run writes no probe. It goes by the server's
/// `notify-keyspace-events` where it can read it, and says in `/status`
/// that it cannot tell where it cannot (a cluster, or `CONFIG` refused).
async fn judge_without_writing(ctx: &crate::run::context::Context, changes: &Changes) {
    let (state, note) = match ctx.redis.keyspace_events_config().await {
        Ok(Some(flags)) => (
            if events::flags_send_what_checks_need(&flags) {
                EventsState::On
            } else {
                EventsState::Off
            },
            format!("dry run: no probe is written; the server's notify-keyspace-events is {flags:?}"),
        ),
        Ok(None) => (
            EventsState::Unknown,
            "dry run: no probe is written, and a Redis Cluster's primaries each have their own configuration: cannot tell".to_string(),
        ),
        Err(e) => (
            EventsState::Unknown,
            format!("dry run: no probe is written, and the server's configuration cannot be read ({e}): cannot tell"),
        ),
    };
    if changes.redis_events() != state {
        tracing::info!(redis_events = state.label(), how = %note, "Redis keyspace notifications");
    }
    changes.note_events(Some(note));
    changes.events_are(state);
}

/// How often the subscriber reads a Redis Cluster's topology again.
const TOPOLOGY_EVERY: Duration = Duration::from_secs(10);

/// A subscription: the topology it covers (None for a single server), its
/// channels (a probe key per primary), and its messages.
type Listening = (
    Option<Topology>,
    Channels,
    BoxStream<'static, (String, String)>,
);

/// Reads the topology, picks the probe keys and subscribes.
async fn listen(runner: &Runner) -> crate::error::Result<Listening> {
    let redis = &runner.ctx.redis;
    let instance = &runner.ctx.settings.reconcile.instance;
    let topology = redis.topology().await?;
    let probe_keys = match &topology {
        None => vec![redis.keys.events_probe(instance)],
        Some(t) => t
            .primaries
            .iter()
            .map(|p| {
                redis
                    .keys
                    .events_probe_in(instance, &p.slots)
                    .ok_or_else(|| {
                        crate::error::Error::Protocol(format!("no probe key for {}", p.addr()))
                    })
            })
            .collect::<crate::error::Result<_>>()?,
    };
    let channels = Channels::new(redis.db(), redis.keys.prefix(), probe_keys);
    let stream = redis
        .subscribe(
            &channels.patterns(),
            &channels.probe_channels(),
            topology.as_ref(),
        )
        .await?;
    if let Some(t) = &topology {
        tracing::debug!(primaries = %primaries(Some(t)), "subscribed to every Redis Cluster primary");
    }
    Ok((topology, channels, stream))
}

/// `host:port` of each primary, for logs.
fn primaries(topology: Option<&Topology>) -> String {
    topology.map_or_else(String::new, |t| {
        t.primaries
            .iter()
            .map(|p| p.addr())
            .collect::<Vec<_>>()
            .join(", ")
    })
}

fn log_verdict(v: &Verdict, topology: Option<&Topology>) {
    let (hash_event, del_event) = v.events_seen();
    // In a cluster, the primaries that did not answer in full (their own
    // `notify-keyspace-events` lacks a flag).
    let silent = topology.map_or_else(String::new, |t| {
        v.silent()
            .into_iter()
            .filter_map(|i| t.primaries.get(i).map(|p| p.addr()))
            .collect::<Vec<_>>()
            .join(", ")
    });
    match v {
        Verdict::Started => tracing::info!(
            "Redis keyspace notifications arrive: showtimes are checked seconds after their seat hash changes"
        ),
        Verdict::Off { .. } => tracing::info!(
            hash_event,
            del_event,
            silent_primaries = %silent,
            needed = events::FLAGS_NEEDED,
            "Redis keyspace notifications are off: the pass alone finds drift (docs/change-detection.md)"
        ),
        Verdict::Stopped { .. } => tracing::warn!(
            hash_event,
            del_event,
            silent_primaries = %silent,
            needed = events::FLAGS_NEEDED,
            "Redis keyspace notifications stopped arriving; a pass covers the gap"
        ),
    }
}

/// Checks what is due, a chunk at a time, grouped by source, within
/// `changes.max_checks_per_second`. Only the active holder of its shard's
/// pass checks: a standby lets its due showtimes go (the active replica
/// hears the same events).
async fn work(runner: &Runner, changes: &Arc<Changes>) {
    let ctx = &runner.ctx;
    let stop = runner.stopping();
    let chunk = ctx.settings.reconcile.scan_chunk.max(1);
    let mut budget = CheckBudget::new(ctx.settings.changes.max_checks_per_second, Instant::now());
    loop {
        // What runs found (grace ends, reads) comes first: it may queue or
        // drop checks.
        changes.apply_findings();
        let next = changes.next_due();
        let sleep = next.map_or(Duration::from_secs(3600), |due| {
            due.saturating_duration_since(Instant::now())
        });
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = changes.queued() => {}
            _ = stop.cancelled() => return,
        }
        let Some(active) = runner.active_on_own_shard() else {
            // Before the first pass nobody knows whose the shard is: the
            // queue keeps what is due (a full one is a gap, and the pass it
            // starts settles the question).
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.cancelled() => return,
            }
            continue;
        };
        let now = Instant::now();
        let allowed = budget.available(now).min(chunk);
        if allowed == 0 {
            tokio::select! {
                _ = tokio::time::sleep(budget.wait_for_one()) => {}
                _ = stop.cancelled() => return,
            }
            continue;
        }
        let due = changes.take_due(now, allowed);
        if due.is_empty() {
            continue;
        }
        budget.spend(due.len());
        if !active {
            tracing::debug!(showtimes = ?due.iter().map(|d| d.showtime).collect::<Vec<_>>(), "checks due on a standby: let go");
            changes.done(due, true);
            continue;
        }
        for source in Source::ALL {
            let part: Vec<Due> = due.iter().filter(|d| d.source == source).copied().collect();
            if !part.is_empty() {
                runner.check(source, part).await;
            }
        }
        changes.show_queue();
    }
}

/// Waits for the next tick at which this replica runs its shard's passes
/// (false: the daemon stops meanwhile).
async fn active_tick(
    runner: &Runner,
    tick: &mut tokio::time::Interval,
    stop: &tokio_util::sync::CancellationToken,
) -> bool {
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return false,
        }
        if runner.active_on_own_shard() == Some(true) {
            return true;
        }
    }
}

/// How often the deadlines ahead are read, and how far ahead.
const DEADLINES_EVERY: Duration = Duration::from_secs(10);
const DEADLINES_AHEAD: Duration = Duration::from_secs(60);
/// Most deadlines read at once (the rest: next read, or the job's schedule).
const DEADLINES_PER_READ: usize = 10_000;
/// A deadline's check runs this long after the order becomes due (MySQL's
/// clock and ours are apart by a round trip).
const DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// Reads the deadlines of PENDING orders coming up (an index range of
/// `(status, expires_at)`) and queues each order's showtime for when it is
/// due (`expires_at + reconcile.expired_order_buffer`, by MySQL's clock).
/// Each read covers from two reads back to a lookahead ahead: an order
/// created after the last read is still seen, one already queued merges
/// (same due time), and one due but still PENDING (its cancel failed or
/// its showtime was busy) is queued again. Cancelled orders leave the
/// range. Only the shard's active replica reads; the `expired-orders`
/// schedule stays as the net.
async fn deadlines(runner: &Runner, changes: &Changes) {
    let ctx = &runner.ctx;
    let stop = runner.stopping();
    let buffer = chrono::Duration::from_std(ctx.settings.reconcile.expired_order_buffer)
        .unwrap_or(chrono::Duration::MAX);
    let ahead = chrono::Duration::from_std(DEADLINES_AHEAD).unwrap_or_default();
    let behind = chrono::Duration::from_std(DEADLINES_EVERY * 2).unwrap_or_default();
    let mut tick = tokio::time::interval(DEADLINES_EVERY);
    while active_tick(runner, &mut tick, &stop).await {
        let read = async {
            let now = ctx.mysql.now_utc().await?;
            let due_now = now - buffer;
            let rows = ctx
                .mysql
                .deadlines_between(
                    due_now - behind,
                    due_now + ahead,
                    ctx.scope(&[]),
                    DEADLINES_PER_READ,
                )
                .await?;
            Ok::<_, crate::error::Error>((due_now, rows))
        };
        let (due_now, rows) = match read.await {
            Ok(read) => read,
            Err(e) => {
                tracing::debug!(error = %e, "could not read the deadlines ahead");
                continue;
            }
        };
        let at = Instant::now();
        for (showtime, expires_at) in rows {
            // Due already: at once.
            let wait = (expires_at - due_now).to_std().unwrap_or_default();
            changes.ask(showtime, at + wait + DEADLINE_MARGIN, Source::Deadline);
        }
    }
}

/// Under `pass.schedule = "auto"` with both change sources configured, the
/// sweep fires every 20 minutes: the sources see changes within seconds,
/// the sweep is the net. While either is down on the shard's active
/// replica (the server sends no keyspace events, the binlog is not read),
/// a pass runs every `every` (a minute) anyway, as with no sources.
async fn while_uncovered(runner: &Arc<Runner>, changes: &Changes, every: Duration) {
    let stop = runner.stopping();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut was_covered = true;
    while active_tick(runner, &mut tick, &stop).await {
        let covered = changes.covered();
        // What the signals follow: the minute while a source is down.
        runner.set_fallback((!covered).then(|| crate::daemon::runner::Fallback {
            every,
            next_fire: chrono::Utc::now()
                + chrono::Duration::from_std(every).unwrap_or(chrono::Duration::MAX),
            why: changes.uncovered_why(),
        }));
        if covered != was_covered {
            was_covered = covered;
            if covered {
                tracing::info!(
                    "both change sources see changes again: the sweep keeps its schedule"
                );
            } else {
                tracing::warn!(
                    redis_events = changes.redis_events().label(),
                    every = ?every,
                    "a change source is down: a pass runs this often until it is back"
                );
            }
        }
        if !covered && let Err(NotStarted::ShuttingDown) = runner.start_pass_now() {
            return;
        }
    }
}

/// After a gap, a pass at once (paced like any): what no source saw, it
/// finds. A pass already going is waited for, then one more is run.
async fn expedite(runner: &Arc<Runner>, changes: &Changes) {
    let stop = runner.stopping();
    // The first pass comes at once, not at the schedule's first fire: the
    // change-driven checks begin with it (it settles whose shard this is),
    // and with a slow `pass.schedule` that fire may be many minutes away.
    // It also covers what changed while nobody listened.
    tokio::select! {
        _ = tokio::time::sleep(FIRST_PASS_AFTER) => {}
        _ = stop.cancelled() => return,
    }
    if !runner.passes_started() && runner.start_pass_now().is_ok() {
        changes.metrics.gaps.with_label_values(&["start"]).inc();
        tracing::info!("the first pass started at once: change-driven checks begin with it");
    }
    loop {
        tokio::select! {
            _ = changes.next_gap() => {}
            _ = stop.cancelled() => return,
        }
        loop {
            // The pass started now covers every gap flagged until now.
            changes.gaps_covered();
            match runner.start_pass_now() {
                Ok(()) => break,
                Err(NotStarted::ShuttingDown) => return,
                Err(NotStarted::AlreadyRunning) => tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = stop.cancelled() => return,
                },
            }
        }
        tracing::info!("a pass started after a gap in change detection");
    }
}
