-- seatflow's reference schema, exactly as in docs/seatflow-contract.md (the
-- contract the reconciler assumes: what each column means, the exact values).
-- Created by `migrate --reference-schema` for tests, the demo and local
-- development; production databases already have these tables.
CREATE TABLE IF NOT EXISTS hall (
  id BIGINT NOT NULL PRIMARY KEY,
  name VARCHAR(64) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS hall_seat (
  hall_id BIGINT NOT NULL,
  seat_no VARCHAR(16) NOT NULL,
  row_label VARCHAR(8),
  col_no INT,
  enabled TINYINT(1) NOT NULL DEFAULT 1,
  PRIMARY KEY (hall_id, seat_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS showtime (
  id BIGINT NOT NULL PRIMARY KEY,
  movie_id BIGINT NOT NULL,
  hall_id BIGINT NOT NULL,
  starts_at DATETIME(3) NOT NULL,
  status VARCHAR(16) NOT NULL,
  KEY idx_showtime_status_starts (status, starts_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS ticket_order (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  order_no VARCHAR(40) NOT NULL UNIQUE,
  user_id BIGINT NOT NULL,
  showtime_id BIGINT NOT NULL,
  status VARCHAR(16) NOT NULL,
  expires_at DATETIME(3) NOT NULL,
  created_at DATETIME(3) NOT NULL,
  paid_at DATETIME(3) NULL,
  cancelled_at DATETIME(3) NULL,
  cancel_reason VARCHAR(32) NULL,
  KEY idx_order_status_expires (status, expires_at),
  KEY idx_order_showtime_status (showtime_id, status)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS order_seat (
  order_id BIGINT NOT NULL,
  showtime_id BIGINT NOT NULL,
  seat_no VARCHAR(16) NOT NULL,
  active TINYINT(1) NULL DEFAULT 1,
  PRIMARY KEY (order_id, seat_no),
  UNIQUE KEY uq_occupancy (showtime_id, seat_no, active)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
