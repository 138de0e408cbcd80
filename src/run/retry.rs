//! Retries of transient errors with exponential backoff and full jitter
//! (safety rule 9): delay = random(0, min(max, base * 2^attempt)).

use std::future::Future;
use std::time::Duration;

use rand::Rng;

use crate::config::RetrySettings;
use crate::error::Result;

/// The ceiling of the n-th retry's delay (n from 0), before jitter.
pub fn backoff_ceiling(policy: &RetrySettings, retry: u32) -> Duration {
    let factor = 2u32.saturating_pow(retry.min(30));
    policy
        .base_delay
        .saturating_mul(factor)
        .min(policy.max_delay)
}

/// Runs `op` until it succeeds, fails with a non-transient error, or has
/// been tried `policy.attempts` times. `what` names the operation in logs.
pub async fn with_retry<T, F, Fut>(policy: &RetrySettings, what: &str, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut retry = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_transient() && retry + 1 < policy.attempts => {
                let ceiling = backoff_ceiling(policy, retry);
                let delay = rand::rng().random_range(Duration::ZERO..=ceiling);
                tracing::warn!(
                    operation = what,
                    attempt = retry + 1,
                    error = %e,
                    delay_ms = delay.as_millis() as u64,
                    "transient error, retrying"
                );
                tokio::time::sleep(delay).await;
                retry += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A connection reset: the kind of error worth retrying.
    fn transient_test_error() -> Error {
        Error::Redis(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        )))
    }

    fn policy(attempts: u32) -> RetrySettings {
        RetrySettings {
            attempts,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(4),
        }
    }

    #[test]
    fn ceiling_grows_exponentially_and_is_capped() {
        let p = policy(5);
        let got: Vec<_> = (0..5).map(|n| backoff_ceiling(&p, n).as_millis()).collect();
        assert_eq!(got, vec![1, 2, 4, 4, 4]);
    }

    #[tokio::test]
    async fn transient_errors_are_retried_until_success() {
        let calls = AtomicU32::new(0);
        let out = with_retry(&policy(4), "test", || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(transient_test_error())
            } else {
                Ok(7)
            }
        })
        .await
        .unwrap();
        assert_eq!((out, calls.load(Ordering::SeqCst)), (7, 3));
    }

    #[tokio::test]
    async fn attempts_are_bounded() {
        let calls = AtomicU32::new(0);
        let out: Result<()> = with_retry(&policy(3), "test", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(transient_test_error())
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn logic_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let out: Result<()> = with_retry(&policy(5), "test", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::Protocol("bad".into()))
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
