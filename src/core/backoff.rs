//! The backoff policy: exponential delays, capped, randomised, never below a floor.
//!
//! Pure: the caller passes the random generator (a per-link one seeded from OS entropy, or a
//! fixed seed in tests), so a given seed gives an exact, repeatable sequence.

use std::time::Duration;

use rand::Rng;

/// How the backoff delay is randomised.
///
/// # Examples
/// ```
/// use relink::Link;
/// use relink::config::Jitter;
/// use relink::error::ConfigError;
///
/// // Full jitter, the default, spreads a fleet's reconnects the most.
/// let builder = Link::builder("tcp://127.0.0.1:6379").reconnect(|r| r.jitter = Jitter::Full);
/// # drop(builder);
/// // A proportional fraction must be in (0, 1].
/// let err = Link::builder("tcp://127.0.0.1:6379")
///     .reconnect(|r| r.jitter = Jitter::Proportional(1.5))
///     .build()
///     .unwrap_err();
/// assert_eq!(err, ConfigError::JitterOutOfRange(1.5));
/// ```
/// [`Reconnect::backoff_base`](crate::config::Reconnect::backoff_base) shows the delays drawn on a live link.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Jitter {
    /// Uniform in `[floor, d]` where `d` is the exponential delay: the fewest total attempts and
    /// the flattest reconnect storm. The default.
    Full,
    /// Uniform in `d × [1 − x, 1 + x]`, `x` in `(0, 1]`.
    Proportional(f64),
    /// "Decorrelated": uniform in `[base, previous × 3]`, capped at max.
    Decorrelated,
    /// No randomness: exactly `d`. Only for tests and single clients; a fleet reconnects in
    /// lockstep with it.
    None,
}

/// Everything the backoff policy needs.
#[derive(Clone, Debug)]
pub(crate) struct BackoffConfig {
    pub base: Duration,
    pub max: Duration,
    pub factor: f64,
    pub floor: Duration,
    pub jitter: Jitter,
}

/// Draws the delay before the next attempt.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    config: BackoffConfig,
    /// The previous delay, for decorrelated jitter.
    previous: Duration,
}

impl Backoff {
    pub(crate) fn new(config: BackoffConfig) -> Backoff {
        let previous = config.base;
        Backoff { config, previous }
    }

    /// The un-randomised delay after `failures` failures in a row (1 or more):
    /// `base × factor^(failures − 1)`, capped at max. The exponent saturates: no overflow
    /// whatever the count.
    pub(crate) fn nominal(&self, failures: u32) -> Duration {
        let c = &self.config;
        let exp = failures.saturating_sub(1).min(1024) as i32;
        let scaled = c.base.as_secs_f64() * c.factor.powi(exp);
        if !scaled.is_finite() || scaled >= c.max.as_secs_f64() {
            c.max
        } else {
            Duration::from_secs_f64(scaled).min(c.max)
        }
    }

    /// The largest delay this policy can draw.
    #[cfg(test)]
    pub(crate) fn ceiling(&self) -> Duration {
        match self.config.jitter {
            Jitter::Proportional(x) => self.config.max.mul_f64(1.0 + x),
            _ => self.config.max,
        }
        .max(self.config.floor)
    }

    /// Draws the delay after `failures` failures in a row.
    pub(crate) fn delay(&mut self, failures: u32, rng: &mut impl Rng) -> Duration {
        let c = &self.config;
        let d = self.nominal(failures);
        let drawn = match c.jitter {
            Jitter::None => d,
            Jitter::Full => uniform(rng, Duration::ZERO, d),
            Jitter::Proportional(x) => uniform(rng, d.mul_f64(1.0 - x), d.mul_f64(1.0 + x)),
            Jitter::Decorrelated => {
                let hi = self.previous.saturating_mul(3).min(c.max).max(c.base);
                let drawn = uniform(rng, c.base, hi);
                self.previous = drawn;
                drawn
            }
        };
        drawn.max(c.floor)
    }

    /// Forgets the decorrelated jitter's memory (after a success).
    pub(crate) fn reset(&mut self) {
        self.previous = self.config.base;
    }
}

fn uniform(rng: &mut impl Rng, lo: Duration, hi: Duration) -> Duration {
    if hi <= lo {
        return lo;
    }
    let (lo, hi) = (lo.as_nanos() as u64, hi.as_nanos() as u64);
    Duration::from_nanos(rng.random_range(lo..=hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn config(jitter: Jitter) -> BackoffConfig {
        BackoffConfig {
            base: Duration::from_millis(100),
            max: Duration::from_secs(10),
            factor: 2.0,
            floor: Duration::from_millis(10),
            jitter,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nominal_delay_doubles_then_stays_at_the_cap() {
        let b = Backoff::new(config(Jitter::None));
        let seq: Vec<_> = (1..=9).map(|n| b.nominal(n)).collect();
        assert_eq!(
            seq,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000].map(ms)
        );
    }

    #[test]
    fn exponent_saturates_without_overflow() {
        let mut b = Backoff::new(config(Jitter::Full));
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(b.nominal(u32::MAX), ms(10_000));
        assert!(b.delay(u32::MAX, &mut rng) <= ms(10_000));
        let huge = BackoffConfig {
            factor: 1e300,
            ..config(Jitter::None)
        };
        assert_eq!(Backoff::new(huge).nominal(5), ms(10_000));
    }

    #[test]
    fn full_jitter_stays_between_floor_and_nominal() {
        let mut b = Backoff::new(config(Jitter::Full));
        let mut rng = StdRng::seed_from_u64(7);
        for n in 1..40 {
            let d = b.delay(n, &mut rng);
            assert!(d >= ms(10) && d <= b.nominal(n), "{n}: {d:?}");
        }
    }

    #[test]
    fn proportional_jitter_stays_within_its_band() {
        let mut b = Backoff::new(config(Jitter::Proportional(0.2)));
        let mut rng = StdRng::seed_from_u64(7);
        for n in 1..40 {
            let d = b.delay(n, &mut rng);
            let nominal = b.nominal(n);
            assert!(
                d >= nominal.mul_f64(0.8) && d <= nominal.mul_f64(1.2),
                "{n}: {d:?}"
            );
        }
        assert_eq!(b.ceiling(), ms(12_000));
    }

    #[test]
    fn decorrelated_jitter_stays_between_base_and_max() {
        let mut b = Backoff::new(config(Jitter::Decorrelated));
        let mut rng = StdRng::seed_from_u64(7);
        for n in 1..100 {
            let d = b.delay(n, &mut rng);
            assert!(d >= ms(100) && d <= ms(10_000), "{n}: {d:?}");
        }
    }

    #[test]
    fn no_jitter_never_goes_below_the_floor() {
        let cfg = BackoffConfig {
            base: ms(1),
            floor: ms(50),
            ..config(Jitter::None)
        };
        let mut b = Backoff::new(cfg);
        let mut rng = StdRng::seed_from_u64(0);
        assert_eq!(b.delay(1, &mut rng), ms(50));
        assert_eq!(b.delay(7, &mut rng), ms(64));
    }

    #[test]
    fn a_fixed_seed_gives_the_same_sequence_and_another_seed_another() {
        let draw = |seed| {
            let mut b = Backoff::new(config(Jitter::Full));
            let mut rng = StdRng::seed_from_u64(seed);
            (1..=8).map(|n| b.delay(n, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }
}
