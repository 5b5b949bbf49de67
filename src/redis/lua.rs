//! Running a Lua script on the shared connection: one round trip (`EVALSHA`,
//! with `EVAL` once if Redis lost the script cache), bounded by the timeout.

use redis::{FromRedisValue, ScriptInvocation};

use super::RedisConnection;
use crate::store::StoreError;

impl RedisConnection {
    /// Runs `invocation` (a script with its keys and arguments); a failure or
    /// a timeout is a [`StoreError`] naming `what`.
    pub(crate) async fn invoke<T>(
        &self,
        what: &'static str,
        invocation: ScriptInvocation<'static>,
    ) -> Result<T, StoreError>
    where
        T: FromRedisValue + Send,
    {
        self.call(what, |mut c| async move {
            invocation.invoke_async(&mut c).await
        })
        .await
    }
}
