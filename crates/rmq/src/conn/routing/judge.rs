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
        if let Some(again) = self.redirected(t, &e, sent_to, must_refresh) {
            t.last_error = Some(e);
            return again;
        }
        // A reply error: the call ran (and failed) unless the reply says
        // it did not run at all.
        if retry_through_failover(&e, false) {
            *must_refresh |= layout_changed(&e);
            t.last_error = Some(e);
            return Outcome::Again { pause: true };
        }
        Outcome::Done(Err(e), None)
    }

    /// A redirect: the try goes again, to the node an ASK names for this
    /// try only, or after a MOVED to the node the slot map now says (and
    /// the map is asked again). Paused once a call was redirected too
    /// often. None: not a redirect this code can read.
    fn redirected(
        &self,
        t: &mut Try,
        e: &RedisError,
        sent_to: &NodeAddr,
        must_refresh: &mut bool,
    ) -> Option<Outcome> {
        let (addr, hs) = e
            .redirect_node()
            .and_then(|(addr, hs)| Some((NodeAddr::of_redirect(addr, sent_to)?, hs)))?;
        t.redirects += 1;
        match e.kind() {
            redis::ErrorKind::Server(redis::ServerErrorKind::Ask) => t.ask = Some(Arc::new(addr)),
            _ => {
                self.lock_map().moved(hs, addr);
                *must_refresh = true;
            }
        }
        Some(Outcome::Again {
            pause: t.redirects > REDIRECTS_WITHOUT_PAUSE,
        })
    }
}

/// Whether an error that did not let the call run says the cluster's
/// layout changed (a failover, a node down, a redirect this code could not
/// read): then the slot map is asked again.
fn layout_changed(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(
            redis::ServerErrorKind::ClusterDown
                | redis::ServerErrorKind::MasterDown
                | redis::ServerErrorKind::ReadOnly
                | redis::ServerErrorKind::Moved
                | redis::ServerErrorKind::Ask
        )
    )
}
