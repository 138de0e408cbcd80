//! Redis data loss, told by the data marker (pure): each marker's value as
//! last seen, and which reads say the server behind it lost its data since.

use std::collections::BTreeMap;

/// What one read of a data marker found (the store's read,
/// `store::redis::data_marker`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerRead {
    /// There, with this value.
    Found(String),
    /// Not there; the value given is set now. `replaced`: the key held
    /// another type (rule 13: ours, replaced), named here.
    Set { replaced: Option<String> },
    /// Not there, and nothing written (a dry run).
    Absent,
}

/// The data markers this process reads, and their values as last seen.
#[derive(Debug)]
pub struct Markers {
    /// The value this process sets where it finds none.
    ours: String,
    seen: BTreeMap<String, String>,
}

impl Markers {
    pub fn new(ours: String) -> Markers {
        Markers {
            ours,
            seen: BTreeMap::new(),
        }
    }

    /// The value this process sets where it finds no marker.
    pub fn value(&self) -> &str {
        &self.ours
    }

    /// The keys of `reads` whose server lost its data since they were last
    /// read: a marker seen before that is gone (set again now, or not, in a
    /// dry run), or that holds another value (another reconciler found it
    /// gone first and set its own). A marker never seen before is no loss:
    /// there was nothing to compare with (the daemon's first pass covers
    /// its start). Keys not among `reads` are forgotten (a Redis Cluster's
    /// primaries changed).
    pub fn judge(&mut self, reads: &[(String, MarkerRead)]) -> Vec<String> {
        self.seen
            .retain(|key, _| reads.iter().any(|(read, _)| read == key));
        let mut lost = Vec::new();
        for (key, read) in reads {
            // Gone (whether set again now or not) after a sighting, or
            // holding another value than the one seen.
            let gone = match read {
                MarkerRead::Found(value) => self
                    .seen
                    .insert(key.clone(), value.clone())
                    .is_some_and(|before| before != *value),
                MarkerRead::Set { .. } => {
                    self.seen.insert(key.clone(), self.ours.clone()).is_some()
                }
                MarkerRead::Absent => self.seen.remove(key).is_some(),
            };
            if gone {
                lost.push(key.clone());
            }
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(key: &str, r: MarkerRead) -> Vec<(String, MarkerRead)> {
        vec![(key.to_string(), r)]
    }

    fn found(v: &str) -> MarkerRead {
        MarkerRead::Found(v.to_string())
    }

    #[test]
    fn a_marker_gone_or_replaced_since_its_last_read_is_a_loss() {
        let mut m = Markers::new("mine".into());
        // First sightings: nothing to compare with.
        assert!(
            m.judge(&read("k", MarkerRead::Set { replaced: None }))
                .is_empty()
        );
        assert!(m.judge(&read("k", found("mine"))).is_empty());
        // Flushed; this process is the first to see it and sets its own.
        assert_eq!(
            m.judge(&read("k", MarkerRead::Set { replaced: None })),
            ["k"]
        );
        assert!(m.judge(&read("k", found("mine"))).is_empty());
        // Flushed; another reconciler saw it first and set its own value.
        assert_eq!(m.judge(&read("k", found("theirs"))), ["k"]);
        assert!(m.judge(&read("k", found("theirs"))).is_empty());
        // A dry run sets nothing: gone is a loss once, then nothing to judge.
        assert_eq!(m.judge(&read("k", MarkerRead::Absent)), ["k"]);
        assert!(m.judge(&read("k", MarkerRead::Absent)).is_empty());
        assert!(m.judge(&read("k", found("theirs"))).is_empty());
    }

    #[test]
    fn each_primary_of_a_cluster_is_judged_alone_and_a_new_one_is_no_loss() {
        let mut m = Markers::new("mine".into());
        let both = |a: MarkerRead, b: MarkerRead| vec![("a".to_string(), a), ("b".to_string(), b)];
        assert!(m.judge(&both(found("x"), found("y"))).is_empty());
        assert_eq!(
            m.judge(&both(found("x"), MarkerRead::Set { replaced: None })),
            ["b"]
        );
        // The primaries changed: "b" is no longer read, "c" is new.
        let next = vec![("a".to_string(), found("x")), ("c".to_string(), found("z"))];
        assert!(m.judge(&next).is_empty());
        // "b" again later: a first sighting, not a loss.
        assert!(m.judge(&both(found("x"), found("q"))).is_empty());
    }
}
