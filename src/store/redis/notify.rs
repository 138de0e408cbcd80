//! Keyspace notifications: a subscriber connection of its own (a connection
//! in subscribe mode can send nothing else), and the probe write that tells
//! whether the server sends them.

use super::*;
use futures_util::StreamExt;

/// One message as delivered: its channel and payload (the event's name).
pub type Notification = (String, String);

impl RedisStore {
    /// The Redis database the keys live in (keyspace channels name it).
    pub fn db(&self) -> i64 {
        self.subscriber
            .as_ref()
            .map_or(0, |c| c.get_connection_info().redis_settings().db())
    }

    /// A dedicated connection subscribed to `pattern` and `channel`: its
    /// messages, until the connection drops (the stream then ends). None in
    /// Redis Cluster mode, where each primary sends its own keys' events and
    /// a subscription per primary is not built yet.
    pub async fn subscribe(
        &self,
        pattern: &str,
        channel: &str,
    ) -> Result<Option<impl futures_util::Stream<Item = Notification> + Send + use<>>> {
        let Some(client) = &self.subscriber else {
            return Ok(None);
        };
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.psubscribe(pattern).await?;
        pubsub.subscribe(channel).await?;
        Ok(Some(pubsub.into_on_message().map(|msg| {
            let payload = msg.get_payload::<String>().unwrap_or_default();
            (msg.get_channel_name().to_string(), payload)
        })))
    }

    /// Writes the probe hash and deletes it, atomically (no one sees the
    /// key) and in one round trip: a server that sends the notifications we
    /// need announces both (`hset`, `del`).
    pub async fn write_probe(&self, key: &str) -> Result<()> {
        let cmds = [
            redis::cmd("MULTI"),
            redis::cmd("HSET").arg(key).arg("probe").arg(1).clone(),
            redis::cmd("DEL").arg(key).clone(),
            redis::cmd("EXEC"),
        ];
        for r in self.pipeline(&cmds).await? {
            r?;
        }
        Ok(())
    }
}
