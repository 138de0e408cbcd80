-- The reconciler's own audit trail (safety rule 10).
CREATE TABLE IF NOT EXISTS reconcile_run (
  run_id CHAR(36) NOT NULL PRIMARY KEY,
  instance VARCHAR(128) NOT NULL,
  kinds VARCHAR(128) NOT NULL,
  dry_run TINYINT(1) NOT NULL,
  started_at DATETIME(3) NOT NULL,
  finished_at DATETIME(3) NULL,
  outcome VARCHAR(16) NULL,
  fixed INT NOT NULL DEFAULT 0,
  report TEXT NULL,
  KEY idx_run_started (started_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS reconcile_fix (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  fix_id CHAR(32) NOT NULL,
  run_id CHAR(36) NOT NULL,
  job VARCHAR(32) NOT NULL,
  kind VARCHAR(32) NOT NULL,
  showtime_id BIGINT NULL,
  seat_no VARCHAR(16) NULL,
  order_id BIGINT NULL,
  before_value VARCHAR(32) NULL,
  after_value VARCHAR(32) NULL,
  fixed_at DATETIME(3) NOT NULL,
  instance VARCHAR(128) NOT NULL,
  UNIQUE KEY uq_fix_id (fix_id),
  KEY idx_fix_run (run_id),
  KEY idx_fix_seat (showtime_id, seat_no, fixed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
