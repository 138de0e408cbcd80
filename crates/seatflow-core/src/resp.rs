//! RESP2, as much of it as the sweep's bulk read of seat hashes needs:
//! commands encoded, and replies decoded straight into what the sweep keeps.
//! An `HGETALL` reply becomes one `SeatFields` (two allocations, whatever
//! the hash's size), not one value per field and per value as a general
//! client's parser builds (why we read these replies ourselves: the product's
//! `store/redis/bulk_read.rs`). Pure: bytes in, values out.
//!
//! Only what those reads are answered with is decoded: simple strings,
//! errors, integers, bulk strings, nulls and flat arrays of strings. Any
//! other reply (a nested array, a RESP3 type) is a `RespError`, and the
//! caller reads the same keys through the `redis` crate instead.

use crate::model::SeatFields;
use std::fmt;

/// One reply, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and the like.
    Status(Vec<u8>),
    /// An error reply's text: `WRONGTYPE Operation against …`.
    Error(String),
    Integer(i64),
    /// `$-1` or `*-1`.
    Nil,
    Bulk(Vec<u8>),
    /// A flat array of strings with an even number of items (`HGETALL`'s
    /// field, value, …; `TIME`'s seconds and microseconds).
    Pairs(SeatFields),
}

/// A reply this decoder does not read (the caller falls back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespError(pub String);

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RESP: {}", self.0)
    }
}

impl std::error::Error for RespError {}

/// Appends one command (an array of bulk strings) to `out`.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    use std::io::Write as _;
    // Writing to a Vec cannot fail.
    let _ = write!(out, "*{}\r\n", args.len());
    for arg in args {
        let _ = write!(out, "${}\r\n", arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Decodes the reply at the start of `buf`: `Ok(None)` when `buf` holds only
/// part of it (read more and call again from the same start), else the reply
/// and how many bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Reply, usize)>, RespError> {
    let Some(line) = line(buf, 0)? else {
        return Ok(None);
    };
    let (reply, end) = match line.kind {
        b'+' => (Reply::Status(line.text.to_vec()), line.next),
        b'-' => (
            Reply::Error(String::from_utf8_lossy(line.text).into_owned()),
            line.next,
        ),
        b':' => (Reply::Integer(number(line.text)?), line.next),
        b'$' => match body(buf, &line)? {
            Body::Incomplete => return Ok(None),
            Body::Null => (Reply::Nil, line.next),
            Body::Bytes(bytes, end) => (Reply::Bulk(bytes.to_vec()), end),
        },
        b'*' => match usize::try_from(number(line.text)?) {
            Err(_) => (Reply::Nil, line.next),
            Ok(n) => match pairs(buf, line.next, n)? {
                None => return Ok(None),
                Some((fields, end)) => (Reply::Pairs(fields), end),
            },
        },
        other => {
            return Err(RespError(format!(
                "a reply of type {:?} is not read here",
                other as char
            )));
        }
    };
    Ok(Some((reply, end)))
}

/// The `n` items of a flat array starting at `at`, into one `SeatFields`.
/// Read twice: once to learn that every item is there and its size, once
/// to copy, so the buffers are allocated once at their size, and a count
/// from the wire is never trusted for an allocation.
fn pairs(buf: &[u8], at: usize, n: usize) -> Result<Option<(SeatFields, usize)>, RespError> {
    if n % 2 == 1 {
        return Err(RespError(format!("an array of {n} items is not pairs")));
    }
    let mut bytes = 0;
    let Some(end) = items(buf, at, n, |item| bytes += item.len())? else {
        return Ok(None);
    };
    let mut fields = SeatFields::with_capacity(n, bytes);
    items(buf, at, n, |item| fields.push(item))?;
    Ok(Some((fields, end)))
}

/// Visits the `n` string items starting at `at`; where they end, or `None`
/// while incomplete.
fn items(
    buf: &[u8],
    mut at: usize,
    n: usize,
    mut visit: impl FnMut(&[u8]),
) -> Result<Option<usize>, RespError> {
    for _ in 0..n {
        let Some(line) = line(buf, at)? else {
            return Ok(None);
        };
        let item = match line.kind {
            b'$' => match body(buf, &line)? {
                Body::Incomplete => return Ok(None),
                Body::Bytes(bytes, end) => {
                    at = end;
                    bytes
                }
                Body::Null => return Err(RespError("a null item in an array".into())),
            },
            b'+' => {
                at = line.next;
                line.text
            }
            other => {
                return Err(RespError(format!(
                    "an item of type {:?} in an array",
                    other as char
                )));
            }
        };
        visit(item);
    }
    Ok(Some(at))
}

/// One line: its type byte, the text after it, and where the next starts.
struct Line<'a> {
    kind: u8,
    text: &'a [u8],
    next: usize,
}

/// The line starting at `at`; `None` while it is incomplete.
fn line(buf: &[u8], at: usize) -> Result<Option<Line<'_>>, RespError> {
    let Some(rest) = buf.get(at..) else {
        return Ok(None);
    };
    let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
        return Ok(None);
    };
    match rest.get(cr + 1) {
        None => Ok(None),
        Some(b'\n') if cr > 0 => Ok(Some(Line {
            kind: rest[0],
            text: &rest[1..cr],
            next: at + cr + 2,
        })),
        _ => Err(RespError("a line does not end with CRLF".into())),
    }
}

/// A bulk string's body, after its `$<len>` line.
enum Body<'a> {
    Incomplete,
    /// `$-1`.
    Null,
    /// The bytes, and where the next line starts.
    Bytes(&'a [u8], usize),
}

fn body<'a>(buf: &'a [u8], head: &Line<'_>) -> Result<Body<'a>, RespError> {
    let Ok(len) = usize::try_from(number(head.text)?) else {
        return Ok(Body::Null);
    };
    let end = head
        .next
        .checked_add(len)
        .filter(|end| end.checked_add(2).is_some())
        .ok_or_else(|| RespError("a bulk string's length overflows".into()))?;
    if buf.len() < end + 2 {
        return Ok(Body::Incomplete);
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Err(RespError("a bulk string does not end with CRLF".into()));
    }
    Ok(Body::Bytes(&buf[head.next..end], end + 2))
}

fn number(line: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            RespError(format!(
                "{:?} is not a number",
                String::from_utf8_lossy(line)
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode_reply(items: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", items.len()).into_bytes();
        for i in items {
            out.extend_from_slice(format!("${}\r\n", i.len()).as_bytes());
            out.extend_from_slice(i);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    #[test]
    fn a_command_is_an_array_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"HGETALL", b"seatflow:seat:{1}"]);
        encode_command(&mut out, &[b"TIME"]);
        assert_eq!(
            out,
            b"*2\r\n$7\r\nHGETALL\r\n$17\r\nseatflow:seat:{1}\r\n*1\r\n$4\r\nTIME\r\n"
        );
    }

    #[test]
    fn each_kind_of_reply_decodes_and_says_where_it_ends() {
        let cases: [(&[u8], Reply); 7] = [
            (b"+OK\r\nrest", Reply::Status(b"OK".to_vec())),
            (
                b"-WRONGTYPE Operation against a key\r\n",
                Reply::Error("WRONGTYPE Operation against a key".into()),
            ),
            (b":-12\r\n", Reply::Integer(-12)),
            (b"$-1\r\n", Reply::Nil),
            (b"*-1\r\n", Reply::Nil),
            (b"$3\r\na\r\n\r\n", Reply::Bulk(b"a\r\n".to_vec())),
            (
                b"*2\r\n$10\r\n1700000000\r\n+5\r\n",
                Reply::Pairs(SeatFields::from_items(&[&b"1700000000"[..], b"5"])),
            ),
        ];
        for (wire, want) in cases {
            let (got, used) = decode(wire).unwrap().unwrap();
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(wire));
            let end = if wire.ends_with(b"rest") {
                wire.len() - 4
            } else {
                wire.len()
            };
            assert_eq!(used, end);
        }
        assert_eq!(
            decode(b"*0\r\n").unwrap(),
            Some((Reply::Pairs(SeatFields::default()), 4))
        );
    }

    #[test]
    fn what_is_not_read_here_is_an_error_not_a_guess() {
        for wire in [
            &b"*1\r\n$1\r\na\r\n"[..],   // odd: not pairs
            b"*2\r\n*0\r\n*0\r\n",       // nested
            b"*2\r\n$-1\r\n$1\r\na\r\n", // a null item
            b"%1\r\n+a\r\n+b\r\n",       // RESP3 map
            b"$1\r\nab\r\n",             // length and body disagree
            b"$x\r\n",
            b"+OK\rX",
            b"\r\n",
        ] {
            assert!(decode(wire).is_err(), "{:?}", String::from_utf8_lossy(wire));
        }
    }

    #[test]
    fn a_huge_announced_length_is_incomplete_not_an_allocation() {
        assert_eq!(decode(b"*4000000000\r\n$1\r\n").unwrap(), None);
        assert_eq!(decode(b"$9000000000000\r\nab").unwrap(), None);
        assert!(decode(b"$9223372036854775807\r\n").unwrap().is_none());
    }

    proptest! {
        /// Any hash's reply decodes to exactly its items, whatever bytes
        /// they hold (CRLF, `$`, non-UTF-8), and every prefix of it is
        /// incomplete, never an error nor a shorter reply.
        #[test]
        fn a_hash_reply_decodes_whole_and_every_prefix_is_incomplete(
            items in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..12),
                 proptest::collection::vec(any::<u8>(), 0..6)),
                0..40,
            ),
            trailing in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let flat: Vec<Vec<u8>> = items.iter().flat_map(|(f, v)| [f.clone(), v.clone()]).collect();
            let wire = encode_reply(&flat);
            let mut with_tail = wire.clone();
            with_tail.extend_from_slice(&trailing);
            let (got, used) = decode(&with_tail).unwrap().unwrap();
            prop_assert_eq!(used, wire.len());
            prop_assert_eq!(got, Reply::Pairs(SeatFields::from_items(&flat)));
            for cut in 0..wire.len() {
                prop_assert_eq!(decode(&wire[..cut]).unwrap(), None, "cut at {}", cut);
            }
        }
    }
}
