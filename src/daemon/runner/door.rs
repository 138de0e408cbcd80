//! The one door of every run, whatever asked for it: a schedule's fire, a
//! gap, an admin run, a change-driven check (an event's, a grace end's, a
//! deadline's, a retry's), `once`, the demo's tour, a library caller. Its
//! request is built once (`RunRequest::new`); here the process's guard is
//! taken and the run made. The daemon records what came of it
//! (`Runner::enter`). Nothing else calls `jobs::run`
//! (`scripts/check_deps.py` checks it).

use crate::model::Kind;
use crate::run::context::Context;
use crate::run::jobs::{self, RunRequest, RunResult};

/// Makes the run `request` describes, once the process's guard allows:
/// one `expired-orders` at a time, so a deadline's check waits for a
/// scheduled run (and a fire's run for a check) rather than reading and
/// cancelling the same orders beside it. The daemon's fires are skipped
/// earlier while their own previous run goes (`Runner::fire`); a wait here
/// is for another trigger's run.
pub async fn enter(ctx: &Context, request: RunRequest) -> RunResult {
    let _turn = if request.kinds.contains(&Kind::ExpiredOrders) {
        Some(ctx.expired_orders_turn.lock().await)
    } else {
        None
    };
    jobs::run(ctx, request).await
}
