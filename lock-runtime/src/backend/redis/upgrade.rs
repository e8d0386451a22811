//! Upgradable reads (see `scripts::upgrade`): the one script that makes an upgradable share
//! the plain lock once it is alone, marks the key against new readers until then, and takes
//! an abandoned upgrade's mark back.

use super::errors::acquire_error;
use super::{RedisBackend, millis};
use crate::backend::{FAIR_QUEUE_TTL, LockSpec, Upgrade};
use crate::error::BoxError;

impl RedisBackend {
    /// One upgrade attempt of `spec`'s share, or (`abandon`) the mark of one given up.
    pub(super) async fn upgrade_by_script(
        &self,
        spec: LockSpec<'_>,
        abandon: bool,
    ) -> Result<Upgrade, BoxError> {
        let fence_key = &self.fence_key(spec.name);
        let writers = &self.writers_key(spec.name);
        let answer: Vec<i64> = self
            .run_acked(
                spec.lease,
                |answer: &Vec<i64>| answer.first() == Some(&1),
                |mut conn, _| {
                    let mut call = self.upgrade.key(spec.name);
                    call.key(fence_key)
                        .key(writers)
                        .arg(spec.token)
                        .arg(millis(spec.lease))
                        .arg(u8::from(spec.fencing))
                        .arg(millis(FAIR_QUEUE_TTL))
                        .arg(u8::from(abandon));
                    async move { call.invoke_async(&mut conn).await }
                },
            )
            .await
            .map_err(acquire_error)?;
        Ok(match answer.as_slice() {
            [1, fence] => Upgrade::Done {
                fencing_token: spec.fencing.then(|| u64::try_from(*fence).unwrap_or(0)),
            },
            [0, ms] => Upgrade::Busy {
                ttl: Some(std::time::Duration::from_millis(
                    u64::try_from(*ms).unwrap_or(0).max(1),
                )),
            },
            [-1] => Upgrade::Lost,
            other => {
                return Err(format!("unexpected reply to the upgrade script: {other:?}").into());
            }
        })
    }
}
