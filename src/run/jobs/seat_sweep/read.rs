//! What a sweep reads per chunk: a keyset page of showtimes, their seat
//! hashes (in one pipeline, or paced in small batches) and their occupancy,
//! both stores at once when unpaced.

use std::time::Instant;

use crate::error::Error;
use crate::model::ShowtimeId;
use crate::model::contract::UnknownRow;
use crate::pace::{Pacer, Store};
use crate::run::context::{ChunkSource, Context};
use crate::store::mysql::{Keyset, OccupancyRead, PageEnd, ShowtimeRow};
use crate::store::redis::{HashRead, ShowtimeRead};

use super::super::RunOptions;

/// What a sweep reads besides the seat hashes.
#[derive(Debug, Clone, Copy)]
pub(super) struct WhatToRead {
    /// Suspect records (grace-period jobs with a non-zero grace).
    pub(super) suspects: bool,
    /// Occupancy only of showtimes whose hash is missing (missing-hashes alone).
    pub(super) occupancy_where_missing_only: bool,
}

/// A page of showtimes and what the stores hold for them; `want` is how many
/// were asked for (fewer means the estate ends here).
pub(super) struct Fetched {
    /// The page's showtimes the contract explains.
    pub(super) page: Vec<ShowtimeRow>,
    /// Those it does not: reported, not swept.
    pub(super) unknown: Vec<UnknownRow>,
    /// Where the page ends (the next starts after it).
    pub(super) last: Option<Keyset>,
    /// Rows the page held, known or not: fewer than `want`, the estate ends.
    pub(super) read: usize,
    pub(super) want: usize,
    /// Redis time, the hash reads and the occupancy; an error quarantines the chunk.
    pub(super) reads: Result<(i64, Vec<ShowtimeRead>, OccupancyRead), Error>,
    /// When the hash reads began: changes before it are in them.
    pub(super) read_at: Instant,
    /// Where the chunk's bulk reads went (its templates go there too).
    pub(super) source: ChunkSource,
}

/// Reads the next page (`None` when `want` is 0 or the page is empty) and,
/// for a page, its seat hashes and occupancy. A failed page read stops the
/// sweep; failed hash or occupancy reads only quarantine the chunk.
pub(super) async fn fetch(
    ctx: &Context,
    opts: &RunOptions,
    what: WhatToRead,
    after: Option<Keyset>,
    end: Option<PageEnd>,
    want: usize,
) -> Result<Option<Fetched>, Error> {
    if want == 0 {
        return Ok(None);
    }
    // The replica's lag is asked once per chunk, before its first read.
    let mut source = ctx.chunk_source(opts.replica_reads).await;
    let scope = ctx.scope(&opts.showtimes);
    let read = ctx
        .bulk_read(&mut source, "read showtimes", |db| async move {
            db.on_sale_page(after, end, want, scope).await
        })
        .await?;
    let (page, unknown, last, read) = (read.rows, read.unknown, read.last, read.read);
    if page.is_empty() {
        return Ok(Some(Fetched {
            page,
            unknown,
            last,
            read,
            want,
            read_at: Instant::now(),
            reads: Ok((0, Vec::new(), OccupancyRead::default())),
            source,
        }));
    }
    let read_at = Instant::now();
    let reads = read_page(ctx, opts, what, &page, &mut source).await;
    Ok(Some(Fetched {
        page,
        unknown,
        last,
        read,
        want,
        reads,
        read_at,
        source,
    }))
}

/// What the stores hold for `page`: Redis' clock, its seat hashes (and
/// suspect records) and their occupancy, each from where `source` says
/// (paced: one store after the other; unpaced: both at once). A chunk's
/// read, and `inspect`'s of one showtime (`seen.rs`).
pub(super) async fn read_page(
    ctx: &Context,
    opts: &RunOptions,
    what: WhatToRead,
    page: &[ShowtimeRow],
    source: &mut ChunkSource,
) -> Result<(i64, Vec<ShowtimeRead>, OccupancyRead), Error> {
    let ids: Vec<ShowtimeId> = page.iter().map(|s| s.id).collect();
    let read_hashes = || read_hashes(ctx, opts.pacer.as_deref(), &ids, what.suspects);
    let source_of_occupancy = source;
    let read_occupancy = |of: Vec<ShowtimeId>| async move {
        let started = Instant::now();
        let of = &of;
        let read = ctx
            .bulk_read(source_of_occupancy, "read occupancy", |db| async move {
                db.occupancy(of).await
            })
            .await;
        if let Some(pacer) = &opts.pacer {
            pacer.observe(Store::Mysql, of.len(), started.elapsed());
        }
        read
    };
    if what.occupancy_where_missing_only {
        async {
            let (now_ms, reads) = read_hashes().await?;
            let missing = page
                .iter()
                .zip(&reads)
                .filter(|(_, r)| r.hash == HashRead::Missing)
                .map(|(s, _)| s.id)
                .collect();
            Ok((now_ms, reads, read_occupancy(missing).await?))
        }
        .await
    } else if opts.pacer.is_some() {
        // Paced: one store after the other (see `scan`).
        match read_hashes().await {
            Ok((now_ms, reads)) => read_occupancy(ids.clone())
                .await
                .map(|o| (now_ms, reads, o)),
            Err(e) => Err(e),
        }
    } else {
        // Both stores at once: the chunk waits for the slower, not the sum.
        let (hashes, occupancy) = tokio::join!(read_hashes(), read_occupancy(ids.clone()));
        hashes.and_then(|(now_ms, reads)| occupancy.map(|o| (now_ms, reads, o)))
    }
}

/// Reads the seat hashes (and suspect records) of `ids`: in one pipeline,
/// or paced, in small batches spaced out by the pacer, so that Redis is
/// never busy with one of ours for long and live holds barely notice.
async fn read_hashes(
    ctx: &Context,
    pacer: Option<&Pacer>,
    ids: &[ShowtimeId],
    with_suspects: bool,
) -> Result<(i64, Vec<ShowtimeRead>), Error> {
    let Some(pacer) = pacer else {
        return ctx
            .retry("read seat hashes", || {
                ctx.redis.read_showtimes(ids, with_suspects)
            })
            .await;
    };
    let mut first_now_ms = None;
    let mut out = Vec::with_capacity(ids.len());
    for batch in ids.chunks(pacer.batch()) {
        tokio::time::sleep(pacer.reserve(batch.len(), Instant::now())).await;
        let started = Instant::now();
        let (now_ms, reads) = ctx
            .retry("read seat hashes", || {
                ctx.redis.read_showtimes(batch, with_suspects)
            })
            .await?;
        pacer.observe(Store::Redis, batch.len(), started.elapsed());
        // The earliest clock reading: grace periods then count from the
        // earliest possible moment, never longer than they were.
        first_now_ms.get_or_insert(now_ms);
        out.extend(reads);
    }
    Ok((first_now_ms.unwrap_or_default(), out))
}
