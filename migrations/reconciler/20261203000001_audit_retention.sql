-- Audit retention prunes reconcile_fix by age in small batches: index the age.
ALTER TABLE reconcile_fix ADD KEY idx_fix_time (fixed_at);
