//! The sweep's bulk read of seat hashes, on connections of its own.
//!
//! Why not the `redis` crate's connection, which every other command uses:
//! its reply parser builds a `redis::Value` per field and per value, and a
//! sweep reads every seat of the estate. At 10 k showtimes × 300 seats that
//! parser and its allocations were about 45 % of the reconciler's CPU
//! (a profile in benches/results/2026-12-07-standing.md), and the crate has
//! no hook for a reply's parser. Here a pipeline of `TIME` and `HGETALL`s is
//! written as RESP2 and each reply decoded straight into `SeatFields`
//! (seatflow-core's `resp.rs`).
//!
//! It serves a single server over TCP, plain or TLS, logged in as the crate
//! would (user and password, database, client name, the same timeout); over
//! TLS with the crate's verification (`RedisTls::client_like_the_crates`:
//! the same roots, client certificate and server name). A server over a
//! Unix socket, a URL with `#insecure` (which the crate refuses too), or a
//! cluster is read through the crate. And whatever this reader does not
//! expect (a connect or login that fails, an
//! error reply other than `WRONGTYPE`, a reply it does not decode, a
//! timeout) gives `None`: the caller reads the same keys through the crate,
//! whose errors and reconnects are the product's, and this reader rests for
//! `REST` before it tries again.

use super::tls::{RedisTls, Tls};
use crate::model::SeatFields;
use seatflow_core::resp::{self, Reply};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// How long the reader stands aside after a failure. Long enough that a
/// Redis that is down or refuses us costs one extra attempt a chunk at most
/// every so often, short enough that a restart is soon read fast again.
const REST: Duration = Duration::from_secs(30);

/// The least a read asks the socket for.
const READ_AHEAD: usize = 64 * 1024;

/// A connection of the reader's: plain TCP or TLS over it.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Stream for S {}
type Conn = Box<dyn Stream>;

pub struct BulkReader {
    host: String,
    port: u16,
    /// None: plain TCP.
    tls: Option<Tls>,
    username: Option<String>,
    password: Option<String>,
    db: i64,
    client_name: String,
    timeout: Duration,
    /// Connections between calls; a call takes one (or opens one) and
    /// gives it back only after a reply read in full, so a connection whose
    /// call failed or was dropped halfway is never reused out of step.
    idle: Mutex<Vec<Conn>>,
    resting_until: Mutex<Option<Instant>>,
    served: AtomicU64,
    stood_aside: AtomicU64,
}

/// What the fast reader did so far: calls it answered, and times it stood
/// aside (after which its callers read through the crate for `REST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastReads {
    pub served: u64,
    pub stood_aside: u64,
    pub resting: bool,
}

impl BulkReader {
    /// A reader for the server `info` names (over TLS with `tls`'s files,
    /// as the crate's connections), or `None` where the crate must read (a
    /// Unix socket, `#insecure`, a TLS configuration it cannot build).
    pub fn for_server(
        info: &redis::ConnectionInfo,
        tls: &RedisTls,
        client_name: &str,
        timeout: Duration,
    ) -> Option<BulkReader> {
        let (host, port, tls) = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => (host, port, None),
            redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                ..
            } => match tls.client_like_the_crates(host) {
                Ok(t) => (host, port, Some(t)),
                Err(why) => {
                    tracing::info!(why, "seat hashes are read through the redis crate");
                    return None;
                }
            },
            _ => return None,
        };
        let settings = info.redis_settings();
        Some(BulkReader {
            host: host.clone(),
            port: *port,
            tls,
            username: settings.username().map(str::to_string),
            password: settings.password().map(str::to_string),
            db: settings.db(),
            client_name: client_name.to_string(),
            timeout,
            idle: Mutex::new(Vec::new()),
            resting_until: Mutex::new(None),
            served: AtomicU64::new(0),
            stood_aside: AtomicU64::new(0),
        })
    }

    /// The server's time (ms) and each key's hash (`None`: a key of the
    /// wrong type; a missing key is an empty hash), in one round trip, or
    /// `None`: read them through the crate.
    pub async fn hashes(&self, keys: &[String]) -> Option<(i64, Vec<Option<SeatFields>>)> {
        let key_len = keys.first().map_or(0, String::len);
        let mut request = Vec::with_capacity(16 + keys.len() * (key_len + 24));
        resp::encode_command(&mut request, &[b"TIME"]);
        for key in keys {
            resp::encode_command(&mut request, &[b"HGETALL", key.as_bytes()]);
        }
        let mut replies = self.pipeline(&request, 1 + keys.len()).await?.into_iter();
        let read = replies.next().and_then(|time| {
            let now_ms = time_ms(&time)?;
            let hashes = replies
                .map(|reply| match reply {
                    Reply::Pairs(fields) => Some(Some(fields)),
                    Reply::Nil => Some(Some(SeatFields::default())),
                    Reply::Error(_) => Some(None), // WRONGTYPE: `pipeline` let no other through
                    Reply::Status(_) | Reply::Integer(_) | Reply::Bulk(_) => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Some((now_ms, hashes))
        });
        if read.is_some() {
            self.served.fetch_add(1, Ordering::Relaxed);
        } else {
            tracing::debug!("a fast read of seat hashes had a reply of an unexpected shape");
            self.rest();
        }
        read
    }

    pub fn counts(&self) -> FastReads {
        FastReads {
            served: self.served.load(Ordering::Relaxed),
            stood_aside: self.stood_aside.load(Ordering::Relaxed),
            resting: lock(&self.resting_until).is_some_and(|t| Instant::now() < t),
        }
    }

    /// Sends `request` (`count` commands encoded with
    /// `resp::encode_command`) and reads their replies; `None` when the
    /// reader is resting or this call failed (then it rests).
    async fn pipeline(&self, request: &[u8], count: usize) -> Option<Vec<Reply>> {
        if self.resting() {
            return None;
        }
        // A connection kept from an earlier call may have been closed by the
        // server since (a restart, its idle timeout): one more try on a
        // fresh one before giving up.
        let mut replies = None;
        if let Some(stream) = self.take_idle() {
            replies = self.call(stream, request, count).await;
        }
        if replies.is_none() {
            replies = match self.open().await {
                Ok(stream) => self.call(stream, request, count).await,
                Err(e) => {
                    tracing::warn!(error = %e, host = %self.host, port = self.port,
                        "the fast reader of seat hashes cannot connect");
                    None
                }
            };
        }
        // A refusal (NOPERM, LOADING, …) is the crate's to report, in the
        // product's terms.
        if let Some(refused) = replies.iter().flatten().find_map(refusal) {
            tracing::debug!(error = %refused, "a fast read of seat hashes was refused");
            replies = None;
        }
        if replies.is_none() {
            self.rest();
        }
        replies
    }

    async fn call(&self, mut stream: Conn, request: &[u8], count: usize) -> Option<Vec<Reply>> {
        let replies = tokio::time::timeout(self.timeout, async {
            stream.write_all(request).await?;
            read_replies(&mut stream, count).await
        })
        .await;
        match replies {
            Ok(Ok(replies)) => {
                self.give_back(stream);
                Some(replies)
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a fast read of seat hashes failed");
                None
            }
            Err(_) => {
                tracing::debug!("a fast read of seat hashes timed out");
                None
            }
        }
    }

    /// A new connection, logged in and named as the crate's are.
    async fn open(&self) -> std::io::Result<Conn> {
        tokio::time::timeout(self.timeout, async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
            tcp.set_nodelay(true)?;
            let mut stream: Conn = match &self.tls {
                None => Box::new(tcp),
                Some(tls) => Box::new(tls.connector.connect(tls.server.clone(), tcp).await?),
            };
            let mut hello = Vec::new();
            let mut checked = 0;
            match (&self.username, &self.password) {
                (Some(user), Some(pass)) => {
                    resp::encode_command(&mut hello, &[b"AUTH", user.as_bytes(), pass.as_bytes()]);
                    checked += 1;
                }
                (None, Some(pass)) => {
                    resp::encode_command(&mut hello, &[b"AUTH", pass.as_bytes()]);
                    checked += 1;
                }
                _ => {}
            }
            if self.db != 0 {
                resp::encode_command(&mut hello, &[b"SELECT", self.db.to_string().as_bytes()]);
                checked += 1;
            }
            // Its reply is not checked: the crate's pipelines name their
            // connection the same way and ignore a refusal too.
            resp::encode_command(
                &mut hello,
                &[b"CLIENT", b"SETNAME", self.client_name.as_bytes()],
            );
            stream.write_all(&hello).await?;
            let replies = read_replies(&mut stream, checked + 1).await?;
            if let Some(Reply::Error(e)) = replies[..checked]
                .iter()
                .find(|r| matches!(r, Reply::Error(_)))
            {
                return Err(std::io::Error::other(format!("login refused: {e}")));
            }
            Ok(stream)
        })
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))?
    }

    fn resting(&self) -> bool {
        let mut until = lock(&self.resting_until);
        match *until {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *until = None;
                false
            }
            None => false,
        }
    }

    fn rest(&self) {
        tracing::info!(
            rest_s = REST.as_secs(),
            "the fast reader of seat hashes stands aside; reading them through the redis crate"
        );
        self.stood_aside.fetch_add(1, Ordering::Relaxed);
        *lock(&self.resting_until) = Some(Instant::now() + REST);
        lock(&self.idle).clear();
    }

    fn take_idle(&self) -> Option<Conn> {
        lock(&self.idle).pop()
    }

    fn give_back(&self, stream: Conn) {
        lock(&self.idle).push(stream);
    }
}

/// `TIME`'s reply (seconds, microseconds) in milliseconds.
fn time_ms(reply: &Reply) -> Option<i64> {
    let Reply::Pairs(time) = reply else {
        return None;
    };
    let (secs, micros) = time.pairs().next()?;
    let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<i64>().ok();
    Some(number(secs)? * 1000 + number(micros)? / 1000)
}

/// An error reply other than `WRONGTYPE` (which the sweep reads as a seat
/// key of the wrong type).
fn refusal(reply: &Reply) -> Option<&str> {
    match reply {
        Reply::Error(e) if !e.starts_with("WRONGTYPE") => Some(e),
        _ => None,
    }
}

/// A lock held for a push or a pop: a panic elsewhere cannot leave it half
/// done, so a poisoned one is used as it is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads exactly `count` replies, error replies among them. An I/O error,
/// an end of stream, a reply the decoder does not read, or bytes beyond the
/// last reply (the connection out of step) is an error.
async fn read_replies(stream: &mut Conn, count: usize) -> std::io::Result<Vec<Reply>> {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_AHEAD);
    let mut at = 0;
    let mut replies = Vec::with_capacity(count);
    while replies.len() < count {
        match resp::decode(&buf[at..]).map_err(std::io::Error::other)? {
            Some((reply, used)) => {
                at += used;
                replies.push(reply);
            }
            None => {
                // Keep only the reply begun; read at least READ_AHEAD, or as
                // much again as a long reply already holds.
                buf.drain(..at);
                at = 0;
                buf.reserve(READ_AHEAD.max(buf.len()));
                if stream.read_buf(&mut buf).await? == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
            }
        }
    }
    if at != buf.len() {
        return Err(std::io::Error::other("bytes beyond the last reply"));
    }
    Ok(replies)
}
