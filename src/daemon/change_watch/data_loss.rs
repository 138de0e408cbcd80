//! Redis data loss as a gap: every second this process reads its data
//! markers (`store::redis::data_marker`: one string of ours per server, per
//! primary in a Redis Cluster), so that a flush, a restart without
//! persistence, a failover to an empty replica or an eviction is told
//! without reading a seat hash. On a loss, the pass under way stops (what
//! it read is gone) and a new one starts at once, soonest showtimes
//! first, at the starting pace (`Pacer::start_again`), followed by more
//! while missing hashes are left over a pass's budget; the scripts are
//! loaded again; the kept pass lease is set again before a standby takes
//! it; and the binlog reader's saved position,
//! should it find none, is a lost one (`Changes::data_losses`). The
//! reconciler's other keys (cursors, suspects, the pass record) are read
//! as none, as they are: the sweep starts over, graces start again.

use std::sync::Arc;
use std::time::Instant;

use super::holder::CHECK_EVERY;
use crate::daemon::change_state::Changes;
use crate::daemon::change_state::marker::Markers;
use crate::daemon::runner::Runner;
use crate::run::context::Context;
use crate::store::redis::MarkerRead;

/// How often a Redis Cluster's primaries are read again for their markers.
const TOPOLOGY_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

pub(super) async fn watch(runner: &Arc<Runner>, changes: &Changes) {
    let ctx = &runner.ctx;
    let stop = runner.stopping();
    // Rule 5: a dry run sets no marker; it still tells a marker gone.
    let write = !ctx.settings.reconcile.dry_run;
    let mut markers = Markers::new(uuid::Uuid::new_v4().simple().to_string());
    let mut keys = MarkerKeys::default();
    let mut wait = std::time::Duration::ZERO;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        let read = async {
            let keys = keys.current(ctx).await?;
            let reads = ctx
                .redis
                .read_markers(&keys, markers.value(), write)
                .await?;
            Ok::<_, crate::error::Error>(keys.into_iter().zip(reads).collect::<Vec<_>>())
        };
        // Every second, failing or not (one command): Redis back empty is
        // told within a second of its return, not a back-off later.
        wait = CHECK_EVERY;
        let reads = match read.await {
            Ok(reads) => reads,
            Err(e) => {
                ctx.denials.note(&e);
                tracing::debug!(error = %e, "could not read the Redis data marker");
                continue;
            }
        };
        for (key, read) in &reads {
            if let MarkerRead::Set {
                replaced: Some(was),
            } = read
            {
                tracing::warn!(
                    key,
                    was,
                    action = "replaced",
                    "reconciler key in the wrong shape (rule 13)"
                );
            }
        }
        let lost = markers.judge(&reads);
        if !lost.is_empty() {
            data_lost(runner, changes, &lost).await;
        }
    }
}

/// What follows a loss of Redis' data (the markers `lost` say where).
async fn data_lost(runner: &Arc<Runner>, changes: &Changes, lost: &[String]) {
    let ctx = &runner.ctx;
    tracing::warn!(
        markers = lost.join(", "),
        "Redis lost its data (a flush, a restart without persistence, a failover to an \
         empty replica or an eviction): a pass starts at once, soonest showtimes first"
    );
    runner.redis_data_lost();
    changes.data_lost();
    if let Err(e) = ctx.redis.load_scripts().await {
        tracing::debug!(error = %e, "could not load the scripts again; each loads on its first use");
    }
    if let Some(kept) = runner.kept_pass() {
        match kept.reassert(ctx).await {
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "could not set the pass lease again"),
        }
        kept.wake();
    }
}

/// The markers' keys: the server's one, or one per primary of a Redis
/// Cluster (read again every [`TOPOLOGY_EVERY`], and after a failed read).
#[derive(Default)]
struct MarkerKeys {
    read: Option<(Vec<String>, Instant)>,
}

impl MarkerKeys {
    async fn current(&mut self, ctx: &Context) -> crate::error::Result<Vec<String>> {
        if let Some((keys, at)) = &self.read
            && at.elapsed() < TOPOLOGY_EVERY
        {
            return Ok(keys.clone());
        }
        self.read = None;
        let redis = &ctx.redis;
        let keys = match redis.topology().await? {
            None => vec![redis.keys.data_marker()],
            Some(t) => t
                .primaries
                .iter()
                .filter_map(|p| redis.keys.data_marker_in(&p.slots))
                .collect(),
        };
        self.read = Some((keys.clone(), Instant::now()));
        Ok(keys)
    }
}
