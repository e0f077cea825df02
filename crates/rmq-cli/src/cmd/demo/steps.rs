//! The demo's steps, each a check of what it shows: range merge (one
//! delivery per key, the newest payload, never early), priorities (highest
//! first), exact times (never early) and retries (never before the
//! shortest backoff wait, a dead letter after the last attempt).

use super::*;

/// How long any one step may wait for a message.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// A consumer that hands out deliveries one at a time.
struct Consumer {
    stream: Deliveries,
    cancel: CancellationToken,
}

impl Consumer {
    fn new(topic: &Topic) -> Self {
        let cancel = CancellationToken::new();
        let stream = topic
            .consumer()
            .concurrency(1)
            // Frequent rescans: priority retries are found at rescans.
            .rescan(Duration::from_millis(25))
            .stream(cancel.clone());
        Consumer { stream, cancel }
    }

    async fn next(&mut self) -> CliResult<Delivery> {
        match tokio::time::timeout(STEP_TIMEOUT, self.stream.next()).await {
            Ok(Some(d)) => Ok(d),
            Ok(None) => Err(CliError::runtime("the demo consumer stopped unexpectedly")),
            Err(_) => Err(CliError::runtime(format!(
                "no message arrived within {} s",
                STEP_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Stops taking and gives back anything taken meanwhile.
    async fn stop(mut self) -> CliResult {
        self.cancel.cancel();
        while let Some(d) = self.stream.next().await {
            d.release().await?;
        }
        Ok(())
    }
}

pub(super) async fn range_merge(client: &Client) -> CliResult {
    say("\n1. range-merge: a burst of duplicates becomes one message per key")?;
    let topic = client
        .define_topic(TopicSpec::new("prices", TopicKind::RangeMerge).slots(4))
        .await?;
    let products = ["sku-1", "sku-2", "sku-3"];
    let mut newest = ["", "", ""].map(String::from);
    let messages: Vec<Message> = (0..1000usize)
        .map(|i| {
            let p = i % products.len();
            let price = 10.0 + ((i * 37) % 500) as f64 / 100.0;
            let payload = format!("{} costs {price:.2} (update {})", products[p], i + 1);
            newest[p].clone_from(&payload);
            Message::new(payload)
                .key(products[p])
                .range(Duration::from_millis(300))
        })
        .collect();
    let first_send = topic.stats().await?.server_ms;
    let report = topic.send_batch(&messages).await?;
    if let Some(Err(e)) = report.results.iter().find(|r| r.is_err()) {
        return Err(unexpected(format!("a price event was refused: {e}")));
    }
    say(&format!(
        "   sent 1000 price events for {} products (key = product id, range 300 ms): {} new, {} merged",
        products.len(),
        report.new_count(),
        report.merged_count()
    ))?;
    say(&format!(
        "   1000 sends merged into {} messages",
        report.new_count()
    ))?;
    if report.new_count() != products.len() {
        return Err(unexpected(format!(
            "expected {} messages, got {}",
            products.len(),
            report.new_count()
        )));
    }
    say("   consuming once the 300 ms range has passed:")?;
    let mut consumer = Consumer::new(&topic);
    for _ in 0..products.len() {
        let d = consumer.next().await?;
        let key = output::lossy(&d.key);
        let payload = output::lossy(&d.payload);
        let is_newest = products
            .iter()
            .position(|p| *p == key)
            .is_some_and(|i| newest[i] == payload);
        say(&format!(
            "   - {key}: {payload}{}, handled {} ms after the first send",
            if is_newest {
                " (the newest of its updates)"
            } else {
                ""
            },
            d.taken_ms - first_send
        ))?;
        d.ack().await?;
        if !is_newest {
            consumer.stop().await?;
            return Err(unexpected(format!(
                "{key} did not carry its newest payload"
            )));
        }
    }
    consumer.stop().await
}

pub(super) async fn priority(client: &Client) -> CliResult {
    say("\n2. priority: the most urgent first, first come first served among equals")?;
    // One slot: priority order is exact within a slot.
    let topic = client
        .define_topic(TopicSpec::new("jobs", TopicKind::Priority).slots(1))
        .await?;
    let jobs = [
        ("nightly-report", 1),
        ("payment-retry", 9),
        ("thumbnail", 5),
        ("fraud-check", 9),
        ("cleanup", 1),
        ("invoice-pdf", 5),
    ];
    for (name, p) in jobs {
        topic.send(Message::new(name).priority(p)).await?;
    }
    say(&format!(
        "   sent in this order: {}",
        jobs.iter()
            .map(|(n, p)| format!("{n} ({p})"))
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let mut expected = jobs.to_vec();
    expected.sort_by_key(|j| std::cmp::Reverse(j.1)); // stable: FIFO among equals
    say("   consumed one at a time (concurrency 1):")?;
    let mut consumer = Consumer::new(&topic);
    let mut got = Vec::new();
    for n in 1..=jobs.len() {
        let d = consumer.next().await?;
        let name = output::lossy(&d.payload);
        say(&format!(
            "   {n}. {name} (priority {})",
            d.priority.unwrap_or(0)
        ))?;
        got.push(name);
        d.ack().await?;
    }
    consumer.stop().await?;
    let want: Vec<String> = expected.iter().map(|(n, _)| n.to_string()).collect();
    if got != want {
        return Err(unexpected(format!("consumed {got:?}, expected {want:?}")));
    }
    Ok(())
}

pub(super) async fn fixed_time(client: &Client) -> CliResult {
    say("\n3. fixed-time: delivered at its time, never before (by the Redis server's clock)")?;
    let topic = client
        .define_topic(TopicSpec::new("reminders", TopicKind::FixedTime).slots(4))
        .await?;
    let sent_at = topic.stats().await?.server_ms;
    topic
        .send(
            Message::new("call customer 42 back")
                .key("reminder-42")
                .delay(Duration::from_millis(500)),
        )
        .await?;
    say(&format!(
        "   at {} sent \"call customer 42 back\" due in 500 ms",
        clock(sent_at)
    ))?;
    let mut consumer = Consumer::new(&topic);
    let d = consumer.next().await?;
    let due = d.due_ms.unwrap_or(0);
    let taken = d.taken_ms;
    say(&format!(
        "   due at {}, handled at {} (late by {} ms)",
        clock(due),
        clock(taken),
        taken - due
    ))?;
    d.ack().await?;
    consumer.stop().await?;
    if taken < due {
        return Err(unexpected(format!("delivered {} ms early", due - taken)));
    }
    Ok(())
}

/// The wait before the retry that follows failed attempt `failed` (1 for
/// the first delivery), as the scripts compute it (`backoff` in
/// `lifecycle.lua`): exponential with equal jitter, i.e. a random time between
/// half and all of `base_ms × 2^(failed-1)`, that doubling capped at `max_ms`.
/// Returns the (shortest, longest) wait in ms.
fn retry_wait_ms(base_ms: u64, max_ms: u64, failed: u32) -> (u64, u64) {
    let doublings = failed.saturating_sub(1).min(63);
    let full = base_ms.saturating_mul(1u64 << doublings).min(max_ms);
    (full / 2, full)
}

pub(super) async fn retries(client: &Client) -> CliResult {
    say("\n4. retries: a failing handler is retried with backoff, then dead-lettered")?;
    const MAX_ATTEMPTS: u32 = 3;
    let topic = client
        .define_topic(
            TopicSpec::new("payments", TopicKind::Priority)
                .slots(4)
                .max_attempts(MAX_ATTEMPTS)
                .backoff(Duration::from_millis(50), Duration::from_millis(200)),
        )
        .await?;
    topic
        .send(Message::new("charge order 7").key("order-7"))
        .await?;
    let (base, max) = (topic.spec().backoff_ms, topic.spec().backoff_max_ms);
    let wait = |failed: u32| retry_wait_ms(base, max, failed);
    say(&format!(
        "   topic \"payments\": max attempts {MAX_ATTEMPTS}, backoff {base} ms doubling up to \
         {max} ms, with jitter:\n   each retry waits a random time between half and all of \
         its backoff, so"
    ))?;
    say(&format!(
        "   {} (plus a few ms to record the failure and pick the retry up)",
        (1..MAX_ATTEMPTS)
            .map(|n| {
                let (lo, hi) = wait(n);
                format!("{lo}-{hi} ms before attempt {}", n + 1)
            })
            .collect::<Vec<_>>()
            .join(", ")
    ))?;
    let mut consumer = Consumer::new(&topic);
    let mut last_ms: Option<i64> = None;
    loop {
        let d = consumer.next().await?;
        let attempt = d.attempt;
        let mut gap = String::new();
        if let Some(previous) = last_ms {
            let (lo, hi) = wait(attempt.saturating_sub(1));
            let after = d.taken_ms - previous;
            gap = format!(
                ", {after} ms after attempt {} (wait: {lo}-{hi} ms)",
                attempt.saturating_sub(1)
            );
            if after < i64::try_from(lo).unwrap_or(i64::MAX) {
                consumer.stop().await?;
                return Err(unexpected(format!(
                    "attempt {attempt} came {after} ms after the previous one, before its \
                     shortest wait of {lo} ms"
                )));
            }
        }
        last_ms = Some(d.taken_ms);
        let error = format!("payment gateway timed out (simulated, attempt {attempt})");
        say(&format!(
            "   attempt {attempt} at {}{gap}: handler failed: {error}",
            clock(d.taken_ms)
        ))?;
        match d.nack(None, &error).await? {
            Settled::Dead => {
                say(&format!(
                    "   gave up after {attempt} attempts: moved to the dead letters"
                ))?;
                break;
            }
            _ if attempt >= MAX_ATTEMPTS => {
                consumer.stop().await?;
                return Err(unexpected(format!(
                    "still retried after attempt {attempt} of {MAX_ATTEMPTS}"
                )));
            }
            _ => {}
        }
    }
    consumer.stop().await?;
    let dead = topic.dead_letters(10).await?;
    let Some(letter) = dead.first() else {
        return Err(unexpected("the dead letter is missing".into()));
    };
    say(&format!(
        "   dead letter: key {}, payload \"{}\", {} attempts, error: {}",
        output::lossy(&letter.key),
        output::lossy(&letter.payload),
        letter.attempts,
        letter.error
    ))?;
    say("   (`rmq dead requeue payments --key order-7` would give it a fresh start)")
}

#[cfg(test)]
mod tests {
    use super::retry_wait_ms;

    #[test]
    fn retry_waits_are_half_to_all_of_a_capped_doubling() {
        assert_eq!(retry_wait_ms(50, 200, 1), (25, 50));
        assert_eq!(retry_wait_ms(50, 200, 2), (50, 100));
        assert_eq!(retry_wait_ms(50, 200, 3), (100, 200));
        assert_eq!(retry_wait_ms(50, 200, 4), (100, 200));
        assert_eq!(retry_wait_ms(1_000, 600_000, 200), (300_000, 600_000));
        assert_eq!(retry_wait_ms(25, 100, 1), (12, 25));
    }
}
