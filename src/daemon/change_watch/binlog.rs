//! The binlog reader task: MySQL's commits as checks of their showtimes,
//! on the shard's active replica, from the position kept in Redis.

use std::time::{Duration, Instant};

use super::{ROLE_EVERY, back_off};
use crate::daemon::change_state::queue::Source;
use crate::daemon::change_state::{BinlogStatus, Changes};
use crate::daemon::runner::Runner;
use crate::error::Stage;
use crate::model::Shard;
use crate::store::mysql::binlog::{BinlogSource, Checkpoint, StartedFrom};
use crate::store::redis::{PositionSave, SavedPosition, saved_value};

/// While this replica runs its shard's passes: reads MySQL's binlog as a
/// replica and queues a check of each showtime of the shard that a
/// committed transaction touched (`ticket_order`, `order_seat`,
/// `showtime`), `changes.mysql_settle` after the commit is read, so that
/// the application's own follow-up lands first. A standby does not read it.
///
/// The position is kept in Redis per shard ([`PositionKeeper`]): a replica
/// that becomes active (at start, or taking over) resumes from the saved
/// position when it belongs to the server it reads, so commits made while
/// nobody read are still checked. A saved position of another server, or
/// one the server cannot send from (purged: the stream fails before it read
/// one whole transaction from there), is a gap (`binlog_position_lost`),
/// and the reader reads on from the server's current position; no saved
/// position at all is none (the daemon's first pass, or the one that made
/// this replica the holder, covers what came before), unless Redis lost its
/// data since it was last read (`Changes::data_losses`): then it is a lost
/// one, a gap (`binlog_position_lost`).
///
/// Any other error or end of the stream is a gap (`binlog_lost`: commits
/// may have been missed, a pass covers them); the source starts again, with
/// a growing wait, from the position after the last whole transaction read.
pub(super) async fn binlog(runner: &Runner, changes: &Changes) {
    let ctx = &runner.ctx;
    let stop = runner.stopping();
    let shard = ctx.settings.shard();
    let settle = ctx.settings.changes.mysql_settle;
    let mut wait = Duration::from_secs(1);
    let mut resume = Resume::Saved;
    // Redis' data losses when the saved position was last read: one since,
    // and no saved position is a lost one, not none.
    let mut losses_known = changes.data_losses();
    while !stop.is_cancelled() {
        if runner.active_on_own_shard() != Some(true) {
            resume = Resume::Saved;
            tokio::select! {
                _ = tokio::time::sleep(ROLE_EVERY) => {}
                _ = stop.cancelled() => return,
            }
            continue;
        }
        let from = match &resume {
            Resume::Saved => match saved_position(runner, shard).await {
                Ok(saved) => {
                    let losses = changes.data_losses();
                    if saved.is_none() && losses > losses_known {
                        changes.gap("binlog_position_lost");
                        tracing::warn!(
                            "the saved MySQL binlog position went with Redis' data: reading from the \
                             server's current position; a pass covers the gap"
                        );
                    }
                    losses_known = losses;
                    saved
                }
                Err(e) => {
                    changes.gap("binlog_lost");
                    runner.ctx.denials.note(&e);
                    tracing::warn!(error = %e, retry_in = ?wait, "could not read the saved MySQL binlog position; a pass covers the gap");
                    if !back_off(&mut wait, &stop).await {
                        return;
                    }
                    continue;
                }
            },
            Resume::At(at) => Some(at.clone()),
            Resume::Current => None,
        };
        let start = tokio::select! {
            started = ctx.start_binlog(from.clone()) => started,
            _ = stop.cancelled() => return,
        };
        let mut source = match start {
            Ok(source) => source,
            Err(e) => {
                // The server was not reached, or refused the reader: the
                // position is not judged, and is tried again.
                changes.gap("binlog_lost");
                runner.ctx.denials.note(&e);
                tracing::warn!(error = %e, retry_in = ?wait, "could not read the MySQL binlog; a pass covers the gap");
                if !back_off(&mut wait, &stop).await {
                    return;
                }
                continue;
            }
        };
        let started_from = match source.started_from() {
            StartedFrom::Given => "saved",
            StartedFrom::Current => "current",
            StartedFrom::OtherServer(saved) => {
                changes.gap("binlog_position_lost");
                tracing::warn!(
                    saved_server = %saved,
                    server = %source.server(),
                    "the saved MySQL binlog position belongs to another server: reading from the server's current position; a pass covers the gap"
                );
                "current"
            }
        };
        let started_at = source.position().clone();
        tracing::info!(
            position = %started_at,
            started_from,
            server = %source.server(),
            "reading the MySQL binlog: showtimes are checked seconds after a commit"
        );
        changes.binlog_streams(true);
        let show = |source: &BinlogSource| {
            changes.show_binlog(Some(BinlogStatus {
                position: source.position().to_string(),
                started_from,
            }));
        };
        show(&source);
        // This reader owns the shard's saved position from now on.
        let mut keeper = PositionKeeper::new(runner, shard);
        keeper.save(runner, &source.checkpoint()).await;
        let mut role_tick = tokio::time::interval(ROLE_EVERY);
        let end = loop {
            tokio::select! {
                next = source.next() => match next {
                    Ok(committed) => {
                        wait = Duration::from_secs(1);
                        let at = Instant::now() + settle;
                        for s in committed.showtimes.into_iter().filter(|s| shard.covers(*s)) {
                            changes.ask(s, at, Source::Binlog);
                        }
                    }
                    Err(e) => break Some(e),
                },
                _ = role_tick.tick() => {
                    // Another replica runs the shard's passes now. (While
                    // this one cannot tell, its lease not renewed, it keeps
                    // reading: the checks wait in the queue.)
                    if runner.active_on_own_shard() == Some(false) {
                        break None;
                    }
                    keeper.save(runner, &source.checkpoint()).await;
                    show(&source);
                }
                _ = stop.cancelled() => break None,
            }
        };
        // Once more as it stops reading (lost role, shutdown, lost stream).
        keeper.save(runner, &source.checkpoint()).await;
        changes.show_binlog(None);
        changes.binlog_streams(false);
        let Some(e) = end else {
            // Shutdown (the loop ends), or a standby now: when active again,
            // it resumes from the saved position.
            resume = Resume::Saved;
            continue;
        };
        if source.proven() {
            resume = Resume::At(source.checkpoint());
            changes.gap("binlog_lost");
            tracing::warn!(error = %e, retry_in = ?wait, "the MySQL binlog stream was lost; a pass covers the gap");
        } else {
            // Not one whole transaction read from where it resumed: a
            // position the server cannot send from (purged, or no place in
            // its files) is not tried again and again.
            resume = Resume::Current;
            changes.gap("binlog_position_lost");
            tracing::warn!(
                error = %e,
                position = %started_at,
                retry_in = ?wait,
                "the MySQL binlog could not be read from the saved position: reading from the server's current position; a pass covers the gap"
            );
        }
        if !back_off(&mut wait, &stop).await {
            return;
        }
    }
}

/// Where the binlog reader starts next.
enum Resume {
    /// The position saved in Redis for the shard (becoming active).
    Saved,
    /// Where this reader's own stream stopped (a lost stream).
    At(Checkpoint),
    /// The server's current position (a position it could not send from).
    Current,
}

/// How long a read or save of the saved position may take (the reader's
/// stream waits meanwhile).
const POSITION_WAIT: Duration = Duration::from_secs(2);

/// The shard's saved binlog position, if any. A key of the wrong type or a
/// value that is no saved position is reported (rule 13: counted as
/// `invalid_data`, logged with its key) and treated as absent: the reader's
/// first save replaces it.
async fn saved_position(runner: &Runner, shard: Shard) -> crate::error::Result<Option<Checkpoint>> {
    let redis = &runner.ctx.redis;
    let read = tokio::time::timeout(POSITION_WAIT, redis.read_binlog_position(shard))
        .await
        .map_err(|_| {
            crate::error::Error::Protocol(format!("no reply within {POSITION_WAIT:?}"))
        })??;
    let key = redis.keys.binlog_position(shard);
    Ok(match read {
        SavedPosition::Absent => None,
        SavedPosition::Found { checkpoint, .. } => Some(checkpoint),
        SavedPosition::WrongType => {
            own_key(runner, &key, "not a string");
            None
        }
        SavedPosition::Unreadable(value) => {
            own_key(runner, &key, &format!("not a saved position: {value:?}"));
            None
        }
    })
}

/// Rule 13 for the saved binlog position: one `invalid_data` error of the
/// job that reports bad data (the first enabled seat job) and a WARN naming
/// the key.
fn own_key(runner: &Runner, key: &str, problem: &str) {
    if let Some(kind) = runner.ctx.settings.bad_data_reporter() {
        runner
            .metrics
            .errors
            .with_label_values(&[kind.label(), Stage::InvalidData.label()])
            .inc();
    }
    tracing::warn!(
        key,
        what = "binlog position",
        problem,
        action = "treated as absent; replaced by the reader's first save",
        "reconciler key in the wrong shape (rule 13)"
    );
}

/// Saves the binlog reader's position for its shard, when it changed: the
/// reader takes the key when its stream starts, then moves it on from the
/// value it saved last. A reader that finds another's value there (one that
/// started after it: a takeover) leaves the key to it from then on.
struct PositionKeeper {
    shard: Shard,
    /// `<instance> <token of this stream>`: no two readers save one value.
    reader: String,
    /// The value this reader saved last (None: the key is not taken yet).
    last: Option<String>,
    saved: Option<Checkpoint>,
    yielded: bool,
}

impl PositionKeeper {
    fn new(runner: &Runner, shard: Shard) -> PositionKeeper {
        let token = uuid::Uuid::new_v4().simple().to_string();
        PositionKeeper {
            shard,
            reader: format!(
                "{} {}",
                runner.ctx.settings.reconcile.instance,
                &token[..12]
            ),
            last: None,
            saved: None,
            yielded: false,
        }
    }

    /// A dry run saves nothing (rule 5): it reads on from where its own
    /// stream is, and a restart starts from the saved position, or the
    /// server's current one, as a real run would.
    async fn save(&mut self, runner: &Runner, now: &Checkpoint) {
        if self.yielded || self.saved.as_ref() == Some(now) || runner.ctx.settings.reconcile.dry_run
        {
            return;
        }
        let redis = &runner.ctx.redis;
        let key = redis.keys.binlog_position(self.shard);
        let value = saved_value(now, &self.reader);
        let saved = tokio::time::timeout(
            POSITION_WAIT,
            redis.save_binlog_position(self.shard, self.last.as_deref(), &value),
        )
        .await;
        match saved {
            Ok(Ok(PositionSave::Raced)) => {
                self.yielded = true;
                tracing::info!(
                    key,
                    "another binlog reader saved the shard's position since: this one leaves it to that one"
                );
            }
            Ok(Ok(done)) => {
                if done == PositionSave::Replaced && self.last.is_some() {
                    own_key(runner, &key, "not a string");
                }
                if done == PositionSave::Restored {
                    // This reader knows where the stream is: nothing is
                    // hidden, so no gap; a restart finds the key again.
                    tracing::warn!(
                        key,
                        "the saved MySQL binlog position was gone (a Redis restart, flush or eviction): saved again by the reader that holds the stream"
                    );
                }
                self.last = Some(value);
                self.saved = Some(now.clone());
            }
            // Tried again at the next tick.
            Ok(Err(e)) => {
                if runner.ctx.denials.note(&e).is_some() {
                    tracing::warn!(key, error = %e, "could not save the binlog position");
                } else {
                    tracing::debug!(key, error = %e, "could not save the binlog position");
                }
            }
            Err(_) => tracing::debug!(key, "could not save the binlog position in time"),
        }
    }
}
