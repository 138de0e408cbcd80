//! One showtime as a pass sees it, for `inspect`: read by the chunk's own
//! read (`read_page`, from the primary, unpaced), its rows named by the
//! strict reading, planned by the chunk's planner input (`plan_of`). Nothing
//! is written; what `inspect` adds (the layout, the orders, the lease, the
//! last repairs) is display only, so what it calls drift is what a pass
//! would repair.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Error;
use crate::model::contract::UnknownRow;
use crate::model::holds::ContractState;
use crate::model::{Occupancy, Template};
use crate::plan::ShowtimePlan;
use crate::run::context::{ChunkSource, Context};
use crate::store::mysql::ShowtimeRow;
use crate::store::redis::ShowtimeRead;

use super::super::{RunOptions, strict};
use super::chunk::plan_of;
use super::read::{WhatToRead, read_page};

/// What a pass reads and plans of one showtime.
pub struct Seen {
    /// Its seat hash and suspect records.
    pub read: ShowtimeRead,
    /// Its rows, named by template seats (the strict reading).
    pub occupancy: Occupancy,
    /// Its rows the contract does not explain, and its hall's.
    pub unknown: Vec<UnknownRow>,
    /// Its hall's enabled seats, as the sweep reads them.
    pub template: Arc<Template>,
    /// The planner's verdict: the repairs, the anomalies, a rebuild.
    pub plan: ShowtimePlan,
}

/// Reads and plans `showtime` as a chunk of one, whatever its status (the
/// caller says whether a pass would sweep it); `contract`: what the
/// schema's deviations hold (rule 17).
pub async fn see(
    ctx: &Context,
    showtime: ShowtimeRow,
    contract: &ContractState,
) -> Result<Seen, Error> {
    let (id, hall) = (showtime.id, showtime.hall_id);
    let page = [showtime];
    let what = WhatToRead {
        suspects: true,
        occupancy_where_missing_only: false,
    };
    let opts = RunOptions::default();
    let mut source = ChunkSource::default();
    let (_, mut reads, occupancy) = read_page(ctx, &opts, what, &page, &mut source).await?;
    let Some(read) = reads.pop() else {
        return Err(Error::Protocol(format!(
            "no seat hash read for showtime {id}"
        )));
    };
    let (mut templates, mut unknown) = ctx.mysql.templates(&[hall]).await?;
    let template = Arc::new(templates.remove(&hall).unwrap_or_default());
    let by_hall = HashMap::from([(hall, template.clone())]);
    let named = strict::name_seats(ctx, &page, &by_hall, occupancy).await?;
    unknown.extend(named.unknown);
    let plan = plan_of(&template, &named.occupancy, id, &read, contract);
    Ok(Seen {
        read,
        occupancy: named.occupancy,
        unknown,
        template,
        plan,
    })
}
