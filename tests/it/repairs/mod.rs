//! The five repairs (the jobs) and the safety rules that bound them, against
//! the real Redis and MariaDB, plus the planner's and the Lua scripts' own
//! contracts. A test of a new repair rule, or of a rule's behaviour on data
//! nobody cleaned, goes here: beside the rule's file (`safety`,
//! `strict_reading`, `own_keys`, `hands_off`, `audit`, ...) or the job's
//! (`jobs`). A race that needs a run paused in a window is a failpoint test
//! instead (`tests/failpoints`).

mod audit;
mod bad_data;
mod bad_values;
mod empty_lists;
mod hands_off;
mod jobs;
mod junk_props;
mod lua_scripts;
mod own_keys;
mod planner_props;
mod refused_writes;
mod safety;
mod schema_deviations;
mod schema_types;
mod seat_hash_reads;
mod strict_reading;
