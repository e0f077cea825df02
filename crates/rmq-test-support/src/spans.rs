//! Counting events in time spans, for tests that bound a rate: over any
//! span of W ms a rate-limited topic delivers at most burst + rate × W.

/// The most of the sorted `times` (ms) that fall within any span of
/// `span_ms`.
pub fn densest(times: &[i64], span_ms: i64) -> usize {
    let (mut best, mut start) = (0, 0);
    for end in 0..times.len() {
        while times[end] - times[start] > span_ms {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::densest;

    #[test]
    fn the_densest_span_is_counted_with_both_ends() {
        assert_eq!(densest(&[], 10), 0);
        assert_eq!(densest(&[0, 5, 10, 11, 30], 10), 3);
        assert_eq!(densest(&[0, 100, 200], 50), 1);
    }
}
