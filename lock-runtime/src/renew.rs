//! The watchdog: keeps a held lock's lease alive and notices when it is lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::guard::Shared;

/// The clock-drift margin subtracted from every lease, as in the Redlock algorithm: 1 % of the
/// lease plus 2 ms. The holder considers its lease over this much before the server does.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// Starts renewing every lease/3. Aborted when the guard is released or dropped.
pub(crate) fn spawn_watchdog(
    shared: Arc<Shared>,
    backend: Arc<dyn Backend>,
    confirmed_at: Instant,
) -> AbortHandle {
    tokio::spawn(watchdog(shared, backend, confirmed_at)).abort_handle()
}

async fn watchdog(shared: Arc<Shared>, backend: Arc<dyn Backend>, mut confirmed_at: Instant) {
    let lease = shared.lease;
    let interval = lease / 3;
    let margin = drift(lease);
    let retry_pause = (lease / 20).max(Duration::from_millis(5));
    loop {
        tokio::time::sleep_until(confirmed_at + interval).await;
        // The lease is only known to last until the last confirmed renewal plus the lease, on
        // this process's monotonic clock; failures are retried until then and not a moment later.
        let valid_until = confirmed_at + lease - margin;
        loop {
            let sent_at = Instant::now();
            if sent_at >= valid_until {
                shared.mark_lost("no renewal confirmed before the lease ended");
                return;
            }
            match tokio::time::timeout_at(valid_until, backend.renew(shared.spec())).await {
                Ok(Ok(true)) => {
                    tracing::trace!(key = %shared.key, "distlock: renewed");
                    confirmed_at = sent_at;
                    break;
                }
                Ok(Ok(false)) => {
                    shared.mark_lost("renewal found the lock held by another owner or gone");
                    return;
                }
                Ok(Err(error)) => {
                    tracing::warn!(key = %shared.key, %error, "distlock: renewal failed, retrying until the lease ends");
                    tokio::time::sleep_until((Instant::now() + retry_pause).min(valid_until)).await;
                }
                Err(_) => {
                    shared.mark_lost("renewal did not answer before the lease ended");
                    return;
                }
            }
        }
    }
}
