//! Retry delays with jitter, for every reconnect and resubscribe loop.
//!
//! A failover or a network blip drops every client of a fleet at the same
//! instant; with a plain doubling backoff they all retry in lockstep, at
//! 50 ms, 100 ms, 200 ms ... after the fault, and the new primary takes
//! each wave at once. [`Backoff`] uses "decorrelated jitter" (the AWS
//! architecture blog's name): each delay is drawn uniformly from
//! `[base, 3 × previous]`, capped, so retries spread out from the first one
//! while the delays still grow about threefold on average. Unlike "full
//! jitter" (`[0, base × 2ⁿ]`) no delay is shorter than `base`, so a server
//! that refuses at once is never retried in a tight loop.
//!
//! The random numbers come from a splitmix64 stream seeded once per
//! `Backoff` from a random UUID: reconnects are rare, and this needs no
//! dependency beyond `uuid`, which the client already uses for its tokens.

use std::time::Duration;

/// A retry delay generator: see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    /// The shortest delay, and the first one's lower bound; > 0.
    base: Duration,
    /// The longest delay; >= `base`.
    cap: Duration,
    /// The last delay handed out (`base` before the first): the next one is
    /// drawn from `[base, 3 × last]`, capped.
    last: Duration,
    /// The splitmix64 state.
    state: u64,
}

impl Backoff {
    /// Delays from `base` up to `cap` (a `cap` below `base` is taken as
    /// `base`; a zero `base` as 1 ms).
    pub(crate) fn new(base: Duration, cap: Duration) -> Backoff {
        let base = base.max(Duration::from_millis(1));
        Backoff {
            base,
            cap: cap.max(base),
            last: base,
            state: uuid::Uuid::new_v4().as_u64_pair().0,
        }
    }

    /// The next delay, in `[base, cap]`.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let high = self.last.saturating_mul(3).min(self.cap);
        let span = high.saturating_sub(self.base).as_nanos() as u64;
        let offset = match span {
            0 => 0,
            span => self.random() % (span + 1),
        };
        self.last = self.base + Duration::from_nanos(offset);
        self.last
    }

    /// The wait before the first attempt after a connection that worked
    /// was lost: uniform in `[0, base]`. A fleet that lost its connections
    /// at the same instant (a `CLIENT KILL`, a failover, a blip) comes back
    /// spread over `base` instead of all in the same millisecond, and a
    /// lone client waits `base / 2` on average.
    pub(crate) fn first_delay(&mut self) -> Duration {
        let span = self.base.as_nanos() as u64;
        Duration::from_nanos(self.random() % (span + 1))
    }

    /// Starts over, as after a success: the next delay is drawn near `base`
    /// again.
    pub(crate) fn reset(&mut self) {
        self.last = self.base;
    }

    /// The next number of the splitmix64 stream.
    fn random(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.state;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(50);
    const CAP: Duration = Duration::from_secs(1);

    #[test]
    fn every_delay_is_within_its_bounds() {
        for _ in 0..100 {
            let mut backoff = Backoff::new(BASE, CAP);
            let mut last = BASE;
            for _ in 0..50 {
                let delay = backoff.next_delay();
                assert!(delay >= BASE && delay <= CAP, "{delay:?}");
                assert!(delay <= last * 3, "{delay:?} after {last:?}");
                last = delay;
            }
            backoff.reset();
            let first = backoff.next_delay();
            assert!(first >= BASE && first <= BASE * 3, "{first:?}");
        }
    }

    #[test]
    fn delays_grow_and_spread() {
        // Clients that fail together do not retry together: the tenth
        // delays of 1000 backoffs are spread over the range, and most have
        // grown well past the base.
        let tenth: Vec<Duration> = (0..1000)
            .map(|_| {
                let mut backoff = Backoff::new(BASE, CAP);
                (0..9).for_each(|_| {
                    backoff.next_delay();
                });
                backoff.next_delay()
            })
            .collect();
        let distinct: std::collections::HashSet<_> = tenth.iter().collect();
        assert!(distinct.len() > 900, "{} distinct", distinct.len());
        let past_double = tenth.iter().filter(|d| **d > BASE * 2).count();
        assert!(past_double > 500, "{past_double} of 1000 past 2 × base");
        let below_half_cap = tenth.iter().filter(|d| **d < CAP / 2).count();
        assert!(below_half_cap > 100, "{below_half_cap} of 1000 below cap/2");
    }

    #[test]
    fn first_delays_spread_over_the_base() {
        let first: Vec<Duration> = (0..1000)
            .map(|_| Backoff::new(BASE, CAP).first_delay())
            .collect();
        assert!(first.iter().all(|d| *d <= BASE), "{first:?}");
        let early = first.iter().filter(|d| **d < BASE / 4).count();
        let late = first.iter().filter(|d| **d > BASE * 3 / 4).count();
        assert!(
            early > 100 && late > 100,
            "{early} early, {late} late of 1000"
        );
    }

    #[test]
    fn odd_arguments_are_made_sane() {
        let mut backoff = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(backoff.next_delay(), Duration::from_millis(1));
        let mut backoff = Backoff::new(CAP, BASE);
        assert_eq!(backoff.next_delay(), CAP);
    }
}
