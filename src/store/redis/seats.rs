//! The seat hashes: the sweep's reads, suspect records, the fenced
//! compare-and-set repairs and rebuilds (rules 1, 2, 4, 13).

use super::*;
use crate::error::{Error, Result};
use crate::model::{SeatFields, SeatNo, SeatRepair, SeatState, ShowtimeId};
use redis::{Cmd, Value};
use std::collections::HashMap;

/// What a scan read at one showtime's seat key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashRead {
    Missing,
    WrongType,
    Fields(SeatFields),
}

/// One showtime's scan result.
#[derive(Debug, Clone)]
pub struct ShowtimeRead {
    pub hash: HashRead,
    /// Suspect records (empty unless asked for).
    pub suspects: HashMap<SeatNo, String>,
    /// Our suspect key was of the wrong type (rule 13): read as no records;
    /// the next suspect write replaces it.
    pub suspects_wrong_type: bool,
}

/// Result of one fenced script call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fenced<T> {
    Done(T),
    /// The showtime lease was not ours: nothing was written.
    LeaseLost,
    /// Seatflow's seat key had the wrong type (rule 13): nothing was written.
    SeatKeyWrongType,
}

/// A script's reply and our own keys it found in the wrong shape and
/// replaced (rule 13), for the caller to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replied<T> {
    pub reply: T,
    /// Full names of the keys replaced.
    pub replaced: Vec<String>,
}

/// The repairs of one showtime, applied by one script call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatBatch {
    pub showtime: ShowtimeId,
    /// Unique per call and kept across its retries.
    pub op_id: String,
    pub repairs: Vec<SeatRepair>,
}

impl SeatBatch {
    pub fn new(showtime: ShowtimeId, repairs: Vec<SeatRepair>) -> SeatBatch {
        SeatBatch {
            showtime,
            op_id: uuid::Uuid::new_v4().simple().to_string(),
            repairs,
        }
    }
}

/// One change to a showtime's suspect records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuspectOp {
    Record {
        seat: SeatNo,
        encoded: String,
    },
    /// Delete the record if it is of `state` (None = whatever it holds).
    Clear {
        seat: SeatNo,
        state: Option<SeatState>,
    },
}

/// One item of an HGETALL reply, as the bytes it holds.
fn bytes(v: &Value) -> Result<&[u8]> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        other => Err(Error::Protocol(format!("unexpected hash item {other:?}"))),
    }
}

/// HGETALL reply of a seat hash → its fields as they are. This runs for every
/// field of every sweep: nothing is decoded, and the items are copied into
/// one buffer (`SeatFields`), so the reply's many small buffers are freed
/// here rather than held while the chunk is planned and repaired.
fn seat_fields(v: Value) -> Result<SeatFields> {
    let items: Vec<&[u8]> = match &v {
        // RESP2: a flat array of field, value, field, value, …
        Value::Array(items) => items.iter().map(bytes).collect::<Result<_>>()?,
        // RESP3: a map.
        Value::Map(pairs) => pairs
            .iter()
            .flat_map(|(k, v)| [k, v])
            .map(bytes)
            .collect::<Result<_>>()?,
        Value::Nil => return Ok(SeatFields::default()),
        other => return Err(Error::Protocol(format!("HGETALL replied {other:?}"))),
    };
    Ok(SeatFields::from_items(&items))
}

impl RedisStore {
    /// One round trip: server time plus HGETALL of each showtime's seat hash
    /// (and suspect hash when `with_suspects`); through the fast reader
    /// where there is one and it reads them (`bulk_read.rs`), else through
    /// the crate.
    pub async fn read_showtimes(
        &self,
        ids: &[ShowtimeId],
        with_suspects: bool,
    ) -> Result<(i64, Vec<ShowtimeRead>)> {
        let keys: Vec<String> = ids
            .iter()
            .flat_map(|&id| {
                let suspect = with_suspects.then(|| self.keys.suspect(id));
                std::iter::once(self.keys.seat(id)).chain(suspect)
            })
            .collect();
        let fast = match &self.bulk {
            Some(reader) => reader.hashes(&keys).await,
            None => None,
        };
        let (now_ms, hashes) = match fast {
            Some(read) => {
                self.trip();
                read
            }
            None => {
                self.crate_seat_reads
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.hashes(&keys).await?
            }
        };
        let mut hashes = hashes.into_iter();
        let mut next = || {
            hashes
                .next()
                .ok_or_else(|| Error::Protocol("a pipeline reply is missing".into()))
        };
        let mut out = Vec::with_capacity(ids.len());
        for _ in ids {
            let hash = match next()? {
                Some(fields) if fields.is_empty() => HashRead::Missing,
                Some(fields) => HashRead::Fields(fields),
                None => HashRead::WrongType,
            };
            let (suspects, suspects_wrong_type) = if with_suspects {
                match next()? {
                    Some(fields) => (fields.to_map(), false),
                    // Our own key of the wrong type (rule 13): no records,
                    // so every grace clock starts now (the safe direction).
                    None => (HashMap::new(), true),
                }
            } else {
                (HashMap::new(), false)
            };
            out.push(ShowtimeRead {
                hash,
                suspects,
                suspects_wrong_type,
            });
        }
        Ok((now_ms, out))
    }

    /// The server's time (ms) and each key's hash (`None`: of the wrong
    /// type), in one pipeline through the crate.
    async fn hashes(&self, keys: &[String]) -> Result<(i64, Vec<Option<SeatFields>>)> {
        let mut cmds = Vec::with_capacity(1 + keys.len());
        cmds.push(redis::cmd("TIME"));
        cmds.extend(keys.iter().map(|k| redis::cmd("HGETALL").arg(k).clone()));
        let mut results = self.pipeline(&cmds).await?.into_iter();
        let time = results
            .next()
            .ok_or_else(|| Error::Protocol("a pipeline reply is missing".into()))?;
        let (secs, micros): (i64, i64) = from_value(time?)?;
        let hashes = results
            .map(|r| match r {
                Ok(v) => seat_fields(v).map(Some),
                Err(e) if e.code() == Some("WRONGTYPE") => Ok(None),
                Err(e) => Err(e.into()),
            })
            .collect::<Result<_>>()?;
        Ok((secs * 1000 + micros / 1000, hashes))
    }

    /// Writes and clears suspect records of several showtimes in one round
    /// trip. A showtime with no ops only has its suspect key replaced if it
    /// is of the wrong type. Returns the suspect keys that were of the wrong
    /// type and replaced (rule 13).
    pub async fn update_suspects(
        &self,
        updates: &[(ShowtimeId, Vec<SuspectOp>)],
        ttl_ms: i64,
    ) -> Result<Vec<String>> {
        let cmds: Vec<Cmd> = updates
            .iter()
            .map(|(id, ops)| {
                let mut c = evalsha(&RECORD_SUSPECTS, &[self.keys.suspect(*id)]);
                c.arg(ttl_ms);
                for op in ops {
                    match op {
                        SuspectOp::Record { seat, encoded } => c.arg("r").arg(seat).arg(encoded),
                        SuspectOp::Clear { seat, state } => c
                            .arg("c")
                            .arg(seat)
                            .arg(state.map(SeatState::as_redis).unwrap_or("")),
                    };
                }
                c
            })
            .collect();
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let mut replaced = Vec::new();
        for (r, (id, _)) in self.pipeline(&cmds).await?.into_iter().zip(updates) {
            let (_changed, was_replaced): (i64, i64) = from_value(r?)?;
            if was_replaced == 1 {
                replaced.push(self.keys.suspect(*id));
            }
        }
        Ok(replaced)
    }

    /// Applies fenced per-seat compare-and-sets, one script per showtime, all
    /// in one round trip. Per showtime: which repairs were applied, or
    /// `LeaseLost`, or `SeatKeyWrongType` (nothing written), or an error;
    /// with our own keys (suspect, done) it replaced for being of the wrong
    /// type (rule 13). Retrying a call with the same batches (same operation
    /// ids) is safe.
    pub async fn repair_seats(
        &self,
        token: &str,
        batches: &[SeatBatch],
    ) -> Result<Vec<Replied<Result<Fenced<Vec<bool>>>>>> {
        let cmds: Vec<Cmd> = batches
            .iter()
            .map(|b| {
                let id = b.showtime;
                let mut c = evalsha(
                    &REPAIR_SEATS,
                    &[
                        self.keys.seat(id),
                        self.keys.showtime_lease(id),
                        self.keys.suspect(id),
                        self.keys.done(id),
                        self.keys.writing(id),
                    ],
                );
                c.arg(token).arg(&b.op_id);
                for r in &b.repairs {
                    c.arg(&r.seat)
                        .arg(r.observed.map(SeatState::as_redis).unwrap_or(""))
                        .arg(r.target.as_redis());
                }
                c
            })
            .collect();
        let results = self.pipeline(&cmds).await?;
        Ok(results
            .into_iter()
            .zip(batches)
            .map(|(r, b)| {
                let mut replaced = Vec::new();
                let reply = (|| {
                    let codes: Vec<i64> = from_value(r?)?;
                    match codes.as_slice() {
                        [1, mask, rest @ ..] if rest.len() == b.repairs.len() => {
                            if mask & 1 != 0 {
                                replaced.push(self.keys.suspect(b.showtime));
                            }
                            if mask & 2 != 0 {
                                replaced.push(self.keys.done(b.showtime));
                            }
                            Ok(Fenced::Done(rest.iter().map(|&c| c == 1).collect()))
                        }
                        [-1, ..] => Ok(Fenced::LeaseLost),
                        [-2, 1] => Ok(Fenced::SeatKeyWrongType),
                        _ => Err(Error::Protocol(format!("repair script replied {codes:?}"))),
                    }
                })();
                Replied { reply, replaced }
            })
            .collect())
    }

    /// Creates a missing hash, fenced, only if it is still missing.
    /// `Done(true)` created, `Done(false)` a hash appeared meanwhile.
    /// Retrying with the same `op_id` is safe.
    pub async fn rebuild_hash(
        &self,
        token: &str,
        op_id: &str,
        showtime: ShowtimeId,
        fields: &[(SeatNo, SeatState)],
    ) -> Result<Replied<Fenced<bool>>> {
        let mut c = evalsha(
            &REBUILD_HASH,
            &[
                self.keys.seat(showtime),
                self.keys.showtime_lease(showtime),
                self.keys.done(showtime),
                self.keys.writing(showtime),
            ],
        );
        c.arg(token).arg(op_id);
        for (seat, state) in fields {
            c.arg(seat).arg(state.as_redis());
        }
        let (code, mask): (i64, i64) = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        let reply = match code {
            1 => Fenced::Done(true),
            0 => Fenced::Done(false),
            -1 => Fenced::LeaseLost,
            -2 => Fenced::SeatKeyWrongType,
            other => {
                return Err(Error::Protocol(format!("rebuild script replied {other}")));
            }
        };
        let replaced = if mask & 2 != 0 {
            vec![self.keys.done(showtime)]
        } else {
            Vec::new()
        };
        Ok(Replied { reply, replaced })
    }
}
