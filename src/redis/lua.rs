//! Running a Lua script on the shared connection: one round trip (`EVALSHA`,
//! with `EVAL` once if Redis lost the script cache), bounded by the timeout.

use redis::{FromRedisValue, Script, ScriptInvocation};

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

impl RedisConnection {
    /// Starts an invocation of `script`, which derives its keys from
    /// `ARGV[1]`, the prefix of key group `group` ([`RedisConnection::group`]).
    /// `KEYS[1]` is a key of that group too (the script never reads it): a
    /// Redis Cluster routes the script by it to the shard of the group's slot.
    pub(crate) fn grouped_invocation(
        &self,
        script: &'static Script,
        group: &str,
    ) -> ScriptInvocation<'static> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(self.routing_key(group))
            .arg(self.group(group));
        invocation
    }

    /// The `KEYS[1]` of [`grouped_invocation`](Self::grouped_invocation): a
    /// name in `group`'s slot that no script reads or writes.
    pub(crate) fn routing_key(&self, group: &str) -> String {
        format!("{}:{group}", self.group(group))
    }
}
