//! Whether a chunk's bulk reads may go to a MySQL replica, judged from
//! what the replica reports of itself (**pure**). Asking it, the rest
//! after a failure and the counts are the product's (`replica.rs`, above
//! the stores, which read the report: `store::mysql::replica`).

use std::time::Duration;

/// What a server says of its replication, as the judgement needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaReport {
    /// No replication is configured on it (`SHOW REPLICA STATUS` is empty).
    NotAReplica,
    /// Its threads: whether each runs (`Yes`), and the lag it reports
    /// (`Seconds_Behind_Master`/`_Source`; None: unknown, as when a thread
    /// is stopped).
    Replicating {
        io_running: bool,
        sql_running: bool,
        lag_seconds: Option<u64>,
    },
}

/// Why a chunk's bulk reads went where they went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// Both threads run and the lag is within the limit: the replica.
    Current,
    /// The reported lag is above `mysql.max_replica_lag`.
    Lagging,
    /// A replication thread is stopped, or the lag is unknown.
    Stopped,
    /// The server reports no replication.
    NotAReplica,
    /// No answer within the ask's timeout, or a connection error.
    Unreachable,
    /// The user may not ask the lag (`SLAVE MONITOR` / `REPLICATION CLIENT`).
    Denied,
    /// A read on the replica failed; the chunk's remaining reads went to
    /// the primary.
    ReadFailed,
    /// The replica rests after a failure (the product's `replica::RETRY_AFTER`).
    Resting,
}

impl Reason {
    pub const ALL: [Reason; 8] = [
        Reason::Current,
        Reason::Lagging,
        Reason::Stopped,
        Reason::NotAReplica,
        Reason::Unreachable,
        Reason::Denied,
        Reason::ReadFailed,
        Reason::Resting,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Reason::Current => "current",
            Reason::Lagging => "lagging",
            Reason::Stopped => "stopped",
            Reason::NotAReplica => "not_a_replica",
            Reason::Unreachable => "unreachable",
            Reason::Denied => "denied",
            Reason::ReadFailed => "read_failed",
            Reason::Resting => "resting",
        }
    }

    /// `replica` or `primary`: where reads for this reason go.
    pub fn server(self) -> &'static str {
        match self {
            Reason::Current => "replica",
            _ => "primary",
        }
    }

    /// Whether the replica rests after this answer: it will not be better
    /// at the next chunk. (A lagging or stopped replica is asked again each
    /// chunk: one cheap statement on a server that answers.)
    pub fn rests(self) -> bool {
        matches!(
            self,
            Reason::NotAReplica | Reason::Unreachable | Reason::Denied | Reason::ReadFailed
        )
    }
}

/// The judgement of a replica's own report: whether a chunk may read it,
/// and the lag it reported.
pub fn judge(report: &ReplicaReport, max_lag: Duration) -> (Reason, Option<u64>) {
    match *report {
        ReplicaReport::NotAReplica => (Reason::NotAReplica, None),
        ReplicaReport::Replicating {
            io_running,
            sql_running,
            lag_seconds,
        } => match lag_seconds {
            // Without its I/O thread a replica does not know how far behind
            // it is (it reports its lag against what it has received).
            _ if !(io_running && sql_running) => (Reason::Stopped, lag_seconds),
            None => (Reason::Stopped, None),
            Some(lag) if u128::from(lag) * 1000 > max_lag.as_millis() => {
                (Reason::Lagging, Some(lag))
            }
            Some(lag) => (Reason::Current, Some(lag)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replicating(io: bool, sql: bool, lag: Option<u64>) -> ReplicaReport {
        ReplicaReport::Replicating {
            io_running: io,
            sql_running: sql,
            lag_seconds: lag,
        }
    }

    #[test]
    fn a_running_replica_within_the_limit_is_read() {
        let max = Duration::from_secs(5);
        assert_eq!(
            judge(&replicating(true, true, Some(0)), max),
            (Reason::Current, Some(0))
        );
        assert_eq!(
            judge(&replicating(true, true, Some(5)), max),
            (Reason::Current, Some(5))
        );
    }

    #[test]
    fn above_the_limit_the_primary_is_read() {
        let max = Duration::from_secs(5);
        assert_eq!(
            judge(&replicating(true, true, Some(6)), max),
            (Reason::Lagging, Some(6))
        );
        // A limit between two whole seconds: a lag that exceeds it.
        let max = Duration::from_millis(5_500);
        assert_eq!(
            judge(&replicating(true, true, Some(6)), max).0,
            Reason::Lagging
        );
    }

    #[test]
    fn a_stopped_thread_or_an_unknown_lag_reads_the_primary() {
        let max = Duration::from_secs(3600);
        for report in [
            replicating(false, true, Some(0)),
            replicating(true, false, Some(0)),
            replicating(true, true, None),
            replicating(false, false, None),
        ] {
            assert_eq!(judge(&report, max).0, Reason::Stopped, "{report:?}");
        }
        assert_eq!(
            judge(&ReplicaReport::NotAReplica, max).0,
            Reason::NotAReplica
        );
    }

    #[test]
    fn only_a_current_replica_is_read_and_only_failures_rest() {
        for reason in Reason::ALL {
            assert_eq!(reason.server() == "replica", reason == Reason::Current);
        }
        let rests: Vec<Reason> = Reason::ALL.into_iter().filter(|r| r.rests()).collect();
        assert_eq!(
            rests,
            [
                Reason::NotAReplica,
                Reason::Unreachable,
                Reason::Denied,
                Reason::ReadFailed
            ]
        );
    }
}
