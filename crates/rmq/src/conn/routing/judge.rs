//! What a reply means for its call: done (an answer, or an error that is
//! the call's own), or again (a redirect or a refusal: it did not run; a
//! broken connection: only a call whose second run is harmless), and
//! whether the slot map must be asked again first.

use super::*;

impl Routing {
    /// What a reply (or the failure of its pipeline, `Err`) from the node
    /// `sent_to` means for its try.
    pub(super) fn judge(
        &self,
        t: &mut Try,
        sent_to: &NodeAddr,
        reply: std::result::Result<(RedisResult<Value>, Option<u32>), Failed>,
        rerun_safe: bool,
        must_refresh: &mut bool,
    ) -> Outcome {
        t.ask = None;
        let e = match reply {
            Ok((Ok(v), acked)) => return Outcome::Done(Ok(v), acked),
            Ok((Err(e), _)) => e,
            Err(Failed::NotSent(e)) => {
                t.last_error = Some(e);
                return Outcome::Again { pause: true };
            }
            Err(Failed::Broken(e)) => {
                return match retry_through_failover(&e, rerun_safe) {
                    true => {
                        t.last_error = Some(e);
                        Outcome::Again { pause: true }
                    }
                    false => Outcome::Done(Err(e), None),
                };
            }
        };
        let redirect = e
            .redirect_node()
            .and_then(|(addr, hs)| Some((NodeAddr::of_redirect(addr, sent_to)?, hs)));
        if let Some((addr, hs)) = redirect {
            t.redirects += 1;
            let pause = t.redirects > REDIRECTS_WITHOUT_PAUSE;
            match e.kind() {
                redis::ErrorKind::Server(redis::ServerErrorKind::Ask) => {
                    t.ask = Some(Arc::new(addr))
                }
                _ => {
                    self.lock_map().moved(hs, addr);
                    *must_refresh = true;
                }
            }
            t.last_error = Some(e);
            return Outcome::Again { pause };
        }
        // A reply error: the call ran (and failed) unless the reply says
        // it did not run at all.
        if retry_through_failover(&e, false) {
            if matches!(
                e.kind(),
                redis::ErrorKind::Server(
                    redis::ServerErrorKind::ClusterDown
                        | redis::ServerErrorKind::MasterDown
                        | redis::ServerErrorKind::ReadOnly
                        // A redirect this code could not read.
                        | redis::ServerErrorKind::Moved
                        | redis::ServerErrorKind::Ask
                )
            ) {
                *must_refresh = true;
            }
            t.last_error = Some(e);
            return Outcome::Again { pause: true };
        }
        Outcome::Done(Err(e), None)
    }
}
