//! The hold window fitted to the pace at which the worker's calls end.
//!
//! A held claim (see [`super::hold`]) ends when every call of its batch has replied or its
//! window has passed; a call that replies after the window costs two row changes instead of
//! one. A fixed window of 20 ms is too short for calls that end at a steady pace but queue: four
//! holds of 1,000 no-op calls through two warm instances take about 300 ms, and most of their
//! calls paid twice. So each hold waits as long as the calls in flight in the worker (its own
//! batch and those ahead of it) are expected to take at the rate holds' calls have been
//! replying, a quarter more for the spread, between the configured floor (`--hold-window`) and
//! ceiling (`--hold-window-max`):
//!
//! ```text
//!   rate      calls of holds ended per second, worker-wide (replied within their hold or
//!             after it), measured between two holds' starts at least 10 ms apart, averaged
//!             (each new measure weighs 0.3)
//!   expected  calls in flight (the new batch included) / rate
//!   window    expected <= ceiling             1.25 x expected, within floor .. ceiling
//!             half of them within ceiling     ceiling
//!             no call of a hold ended yet     ceiling (the functions may be starting)
//!             else, or no rate yet            floor (waiting longer would win little)
//! ```
//!
//! Calls that end slowly make a low rate: their holds keep the floor, as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The weight of each new measure in the rate.
const WEIGHT: f64 = 0.3;
/// The shortest span a rate is measured over.
const SPAN_MIN: Duration = Duration::from_millis(10);

pub(super) struct Paces {
    floor: Duration,
    ceiling: Duration,
    /// Calls of holds ended, ever.
    replies: AtomicU64,
    /// Where the last measure ended (its time and `replies` then), and the rate (replies a
    /// second; None until measured).
    rate: Mutex<(Instant, u64, Option<f64>)>,
}

impl Paces {
    /// Windows between `floor` and `ceiling` (a ceiling below the floor is the floor).
    pub(super) fn new(floor: Duration, ceiling: Duration) -> Self {
        Paces {
            floor,
            ceiling: ceiling.max(floor),
            replies: AtomicU64::new(0),
            rate: Mutex::new((Instant::now(), 0, None)),
        }
    }

    /// The floor of the window (`--hold-window`): also where a producer's pause after a claim
    /// that found nothing starts.
    pub(super) fn floor(&self) -> Duration {
        self.floor
    }

    /// A call of a hold ended (its reply taken by the hold or not).
    pub(super) fn replied(&self) {
        self.replies.fetch_add(1, Ordering::Relaxed);
    }

    /// The window of a hold that starts at `now` with `in_flight` calls in the worker, its
    /// own batch included.
    pub(super) fn window(&self, in_flight: usize, now: Instant) -> Duration {
        let rate = {
            let mut state = self.rate.lock().unwrap_or_else(|p| p.into_inner());
            let (since, count, rate) = *state;
            let span = now.saturating_duration_since(since);
            if span >= SPAN_MIN {
                let replies = self.replies.load(Ordering::Relaxed);
                let measured = replies.saturating_sub(count) as f64 / span.as_secs_f64();
                let rate = match rate {
                    // a span with no reply: the calls are slower than the holds, or none ran
                    _ if measured <= 0.0 => rate.map(|r| (1.0 - WEIGHT) * r),
                    Some(r) => Some((1.0 - WEIGHT) * r + WEIGHT * measured),
                    None => Some(measured),
                };
                *state = (now, replies, rate);
            }
            state.2
        };
        let Some(rate) = rate.filter(|r| r.is_finite() && *r > 0.0) else {
            // no call of a hold has ended yet (the worker has just started, its functions may
            // be starting too): wait up to the ceiling rather than pay twice for every call
            return if self.replies.load(Ordering::Relaxed) == 0 { self.ceiling } else { self.floor };
        };
        let (floor, ceiling) = (self.floor.as_secs_f64(), self.ceiling.as_secs_f64());
        let expected = in_flight as f64 / rate;
        let secs = if expected <= ceiling {
            (expected * 1.25).clamp(floor, ceiling)
        } else if expected / 2.0 <= ceiling {
            ceiling
        } else {
            floor
        };
        Duration::try_from_secs_f64(secs).unwrap_or(self.floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn replies(paces: &Paces, n: usize) {
        for _ in 0..n {
            paces.replied();
        }
    }

    #[test]
    fn the_window_is_the_ceiling_until_a_call_ends_then_the_floor_until_a_rate_is_measured() {
        let paces = Paces::new(20 * MS, 200 * MS);
        let start = Instant::now();
        // nothing has ended yet: the functions may still be starting
        assert_eq!(paces.window(1000, start), 200 * MS);
        assert_eq!(paces.window(1000, start + 50 * MS), 200 * MS);
        // calls end, less than SPAN_MIN after the last measure: no rate yet
        let paces = Paces::new(20 * MS, 200 * MS);
        replies(&paces, 100);
        assert_eq!(paces.window(1000, start + 5 * MS), 20 * MS);
    }

    #[test]
    fn calls_in_flight_are_waited_for_at_the_rate_they_end_up_to_the_ceiling() {
        let paces = Paces::new(20 * MS, 200 * MS);
        let start = Instant::now();
        paces.window(0, start);
        // 10,000 replies a second
        replies(&paces, 200);
        let w = paces.window(1000, start + 20 * MS);
        assert!(w > 120 * MS && w < 130 * MS, "{w:?}");
        // 3,000 in flight: 300 ms, half of them within the ceiling
        assert_eq!(paces.window(3000, start + 20 * MS), 200 * MS);
        // 10,000: a second; the floor
        assert_eq!(paces.window(10_000, start + 20 * MS), 20 * MS);
        // a few: the floor, not less
        assert_eq!(paces.window(10, start + 20 * MS), 20 * MS);
    }

    #[test]
    fn spans_with_no_reply_bring_the_window_back_to_the_floor() {
        let paces = Paces::new(20 * MS, 200 * MS);
        let start = Instant::now();
        paces.window(0, start);
        replies(&paces, 200);
        assert!(paces.window(1000, start + 20 * MS) > 100 * MS);
        // calls slower than the holds: no reply taken for a while
        let mut at = start + 20 * MS;
        for _ in 0..10 {
            at += 20 * MS;
            paces.window(1000, at);
        }
        assert_eq!(paces.window(1000, at + 20 * MS), 20 * MS);
    }

    #[test]
    fn a_ceiling_below_the_floor_is_the_floor() {
        let paces = Paces::new(50 * MS, 10 * MS);
        let start = Instant::now();
        paces.window(0, start);
        replies(&paces, 200);
        assert_eq!(paces.window(1000, start + 20 * MS), 50 * MS);
    }
}
