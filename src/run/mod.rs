//! What one run needs, lowest first: the progress it draws, its retries,
//! the permissions refused while it runs (`refusals`), the showtime leases
//! (`showtime_leases`), where a chunk's bulk reads go (`replica_choice`);
//! the `context` built from them; the shard's pass lease (`pass_lease`);
//! and the `jobs` a run executes.

pub mod context;
pub mod jobs;
pub mod pass_lease;
pub mod progress;
pub mod refusals;
pub mod replica_choice;
pub mod retry;
pub mod showtime_leases;
