//! Families made and listed in one step: each part of the metrics makes
//! its families through [`Families`], which lists them for registering and
//! creates their labelled series at 0, so a new family is written in one
//! place (its name, help, labels and series), never also in a separate
//! list of what to register or zero.

use std::sync::Arc;

use prometheus::Registry;
use prometheus::core::{Collector, Desc, MetricVec, MetricVecBuilder};
use prometheus::proto::MetricFamily;

/// The families one part of the metrics made, registered together (now,
/// or when the part is exported).
#[derive(Clone, Default)]
pub(super) struct Families(Vec<Arc<dyn Collector>>);

impl Families {
    /// `family`, just made, listed for registering.
    pub(super) fn add<C: Collector + Clone + 'static>(&mut self, family: C) -> C {
        self.0.push(Arc::new(family.clone()));
        family
    }

    /// `family` listed, with each of `series` (its label values) created
    /// at 0: every labelled series exists from start.
    pub(super) fn add_at_zero<B, L, V>(
        &mut self,
        family: MetricVec<B>,
        series: impl IntoIterator<Item = L>,
    ) -> MetricVec<B>
    where
        B: MetricVecBuilder + 'static,
        L: AsRef<[V]>,
        V: AsRef<str> + std::fmt::Debug,
    {
        for labels in series {
            family.with_label_values(labels.as_ref());
        }
        self.add(family)
    }

    /// Registers every family listed in `registry`.
    pub(super) fn register(&self, registry: &Registry) {
        for family in &self.0 {
            registry
                .register(Box::new(Listed(Arc::clone(family))))
                .expect("metric names are unique");
        }
    }
}

/// A listed family as the registry takes it (a box of its own).
struct Listed(Arc<dyn Collector>);

impl Collector for Listed {
    fn desc(&self) -> Vec<&Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.collect()
    }
}
