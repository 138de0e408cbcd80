//! The daemon as it runs for days: the real binary on its schedules, the
//! replicas sharing each pass, a restart of Redis under it, its HTTP
//! server's bounds, its metrics, alerts and dashboards checked with real
//! Prometheus tools, and live traffic with connections killed (chaos). A
//! test of a new metric or alert goes in `observability`; of the schedule,
//! `/status` or the admin endpoints in `run` (the binary's `run`); of the
//! pass lease in `passes`; of a fault the daemon must come back from by
//! itself (rule 19) in `recovery`.

mod chaos;
mod http_bounds;
mod observability;
mod passes;
mod recovery;
mod resilience;
mod run;
