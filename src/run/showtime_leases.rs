//! The showtime lease (the spec's per-showtime mutex, safety rule 2): `SET
//! PX` with a random token where no lease is (a lease key of another type is
//! nobody's lease and is replaced, rule 13), renewed while a batch runs,
//! released by compare-and-delete. Every repair script checks the token again
//! itself, so a holder that paused past its lease writes nothing even if it
//! does not know yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;
use crate::model::ShowtimeId;
use crate::store::redis::{LeaseTake, RedisStore};

/// The showtime leases held by the whole process (showtime → token), so
/// that a shutdown can release what a cancelled run still held.
#[derive(Clone, Default)]
pub struct LeaseBook(Arc<Mutex<HashMap<ShowtimeId, String>>>);

impl LeaseBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ShowtimeId, String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Compare-and-deletes every lease still recorded.
    pub async fn release_all(&self, redis: &RedisStore) -> Result<()> {
        let held: Vec<(ShowtimeId, String)> = self.lock().drain().collect();
        let mut by_token: HashMap<String, Vec<ShowtimeId>> = HashMap::new();
        for (id, token) in held {
            by_token.entry(token).or_default().push(id);
        }
        for (token, ids) in by_token {
            redis.release_leases(&token, &ids).await?;
        }
        Ok(())
    }
}

pub struct RunLeases {
    redis: RedisStore,
    book: LeaseBook,
    token: String,
    ttl: Duration,
    /// Held showtimes and when each lease was last set or renewed.
    held: Mutex<HashMap<ShowtimeId, Instant>>,
}

/// The outcome of trying to take several showtimes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Acquired {
    pub taken: Vec<ShowtimeId>,
    /// Among `taken`, showtimes whose lease key was of another type than a
    /// string: nobody's lease, replaced by ours (rule 13). The caller reports
    /// each key (WARN, `invalid_data`).
    pub replaced: Vec<ShowtimeId>,
    /// Held by someone else: skipped this run, never waited on.
    pub busy: Vec<ShowtimeId>,
    /// Among `busy`, leases without expiry (PTTL -1): not ours (we always
    /// set one), so stuck until an operator looks (rule 13). Never deleted
    /// or taken over here: another reconciler version might own them.
    pub stuck: Vec<ShowtimeId>,
}

impl RunLeases {
    pub fn new(redis: RedisStore, ttl: Duration, book: LeaseBook) -> RunLeases {
        RunLeases {
            redis,
            book,
            token: uuid::Uuid::new_v4().to_string(),
            ttl,
            held: Mutex::new(HashMap::new()),
        }
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    fn ttl_ms(&self) -> u64 {
        self.ttl.as_millis() as u64
    }

    fn held_map(&self) -> std::sync::MutexGuard<'_, HashMap<ShowtimeId, Instant>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The showtimes we hold now.
    pub fn held(&self) -> Vec<ShowtimeId> {
        self.held_map().keys().copied().collect()
    }

    /// Tries every showtime once, in one round trip.
    pub async fn acquire(&self, ids: &[ShowtimeId]) -> Result<Acquired> {
        let mut out = Acquired::default();
        if ids.is_empty() {
            return Ok(out);
        }
        let now = Instant::now();
        let got = self
            .redis
            .acquire_leases(&self.token, ids, self.ttl_ms())
            .await?;
        for (&id, take) in ids.iter().zip(got) {
            if take.is_taken() {
                self.held_map().insert(id, now);
                self.book.lock().insert(id, self.token.clone());
                out.taken.push(id);
                if take == LeaseTake::Replaced {
                    out.replaced.push(id);
                }
            } else {
                out.busy.push(id);
            }
        }
        // One more round trip, only when something was busy.
        if !out.busy.is_empty() {
            let pttls = self.redis.lease_pttls(&out.busy).await?;
            out.stuck = out
                .busy
                .iter()
                .zip(pttls)
                .filter(|(_, pttl)| *pttl == -1)
                .map(|(&id, _)| id)
                .collect();
        }
        Ok(out)
    }

    /// Renews the leases among `ids` that have used a third of their TTL.
    /// Returns the showtimes whose lease turned out to be lost.
    pub async fn renew_due(&self, ids: &[ShowtimeId]) -> Result<Vec<ShowtimeId>> {
        let now = Instant::now();
        let due: Vec<ShowtimeId> = {
            let held = self.held_map();
            ids.iter()
                .copied()
                .filter(|id| {
                    held.get(id)
                        .is_some_and(|t| now.duration_since(*t) >= self.ttl / 3)
                })
                .collect()
        };
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let renewed = self
            .redis
            .renew_leases(&self.token, &due, self.ttl_ms())
            .await?;
        let mut lost = Vec::new();
        for (id, ok) in due.into_iter().zip(renewed) {
            if ok {
                self.held_map().insert(id, now);
            } else {
                self.held_map().remove(&id);
                self.book.lock().remove(&id);
                lost.push(id);
            }
        }
        Ok(lost)
    }

    /// Compare-and-delete of these leases.
    pub async fn release(&self, ids: &[ShowtimeId]) -> Result<()> {
        let mine: Vec<ShowtimeId> = {
            let held = self.held_map();
            ids.iter()
                .copied()
                .filter(|id| held.contains_key(id))
                .collect()
        };
        if mine.is_empty() {
            return Ok(());
        }
        let released = self.redis.release_leases(&self.token, &mine).await;
        let mut held = self.held_map();
        let mut book = self.book.lock();
        for id in &mine {
            held.remove(id);
            book.remove(id);
        }
        released.map(|_| ())
    }

    /// Releases everything still held (end of a job, shutdown).
    pub async fn release_all(&self) -> Result<()> {
        let ids = self.held();
        self.release(&ids).await
    }
}
