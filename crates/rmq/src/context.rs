//! What a topic needs of its client: the connection (with its script
//! runner) and the key prefix. A [`Topic`](crate::Topic) holds this
//! context, shared with the [`Client`](crate::Client) that made it, instead
//! of the client itself: topics never reach into the client's insides, and
//! the client (connecting, preflight, the topic registry) depends on topics,
//! not the other way round.

use crate::conn::Redis;

pub(crate) struct Context {
    pub(crate) redis: Redis,
    pub(crate) prefix: String,
}

impl Context {
    pub(crate) fn is_cluster(&self) -> bool {
        self.redis.is_cluster()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("prefix", &self.prefix)
            .field("cluster", &self.is_cluster())
            .finish_non_exhaustive()
    }
}
