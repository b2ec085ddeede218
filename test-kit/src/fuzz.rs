//! Seeds and case counts for the project's randomized tests, so that
//! `cargo xtask fuzz` (docs/fuzzing.md) can send them into new inputs.
//!
//! Every randomized test runs a fixed seed and a fixed number of cases by
//! default, so CI stays repeatable and fast. Two environment variables
//! change that:
//!
//! - `RULES_FUZZ_SEED` (a `u64`): replaces every test's fixed seed. Each test
//!   mixes it with its own fixed seed, so that two tests never walk the same
//!   stream; the same value replays the same cases.
//! - `RULES_FUZZ_SCALE` (a `u64` >= 1, default 1): multiplies each test's
//!   case count.
//!
//! A failing test names the seed and scale that replay it (see [`Fuzz`]'s
//! `Drop`). Nothing in the product reads these variables: the crate is a
//! dev-dependency only, shared by every crate's tests.

use thiserror::Error;

/// The variable that replaces the tests' fixed seeds.
pub const SEED_VAR: &str = "RULES_FUZZ_SEED";
/// The variable that multiplies the tests' case counts.
pub const SCALE_VAR: &str = "RULES_FUZZ_SCALE";

/// A fuzz variable is set but unusable: a typo must not quietly run the
/// fixed seed instead of the one asked for.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FuzzEnvError {
    #[error("{var}={value:?} is not an unsigned 64-bit integer")]
    NotANumber { var: &'static str, value: String },
    #[error("{SCALE_VAR}=0: the scale multiplies case counts and must be at least 1")]
    ZeroScale,
}

/// One randomized test's seed and scale. Keep it alive for the whole test:
/// if the test panics, dropping it prints how to replay the failure.
#[derive(Debug)]
pub struct Fuzz {
    test: &'static str,
    seed: u64,
    scale: u64,
    /// `RULES_FUZZ_SEED` as given, when it was.
    given: Option<u64>,
}

impl Fuzz {
    /// Reads `RULES_FUZZ_SEED` and `RULES_FUZZ_SCALE`. Without them the
    /// test gets `default_seed` and scale 1: exactly its fixed behaviour.
    pub fn from_env(test: &'static str, default_seed: u64) -> Result<Fuzz, FuzzEnvError> {
        Fuzz::new(
            test,
            default_seed,
            std::env::var(SEED_VAR).ok().as_deref(),
            std::env::var(SCALE_VAR).ok().as_deref(),
        )
    }

    /// [`Fuzz::from_env`] with the variables' values passed in.
    pub fn new(
        test: &'static str,
        default_seed: u64,
        seed: Option<&str>,
        scale: Option<&str>,
    ) -> Result<Fuzz, FuzzEnvError> {
        let given = seed.map(|s| parse(SEED_VAR, s)).transpose()?;
        let scale = scale.map(|s| parse(SCALE_VAR, s)).transpose()?.unwrap_or(1);
        if scale == 0 {
            return Err(FuzzEnvError::ZeroScale);
        }
        let seed = match given {
            // Never zero, in case a test seeds a xorshift generator (zero
            // is its fixed point); `Rng` itself would not mind.
            Some(given) => match mix(given ^ default_seed) {
                0 => default_seed,
                mixed => mixed,
            },
            None => default_seed,
        };
        Ok(Fuzz {
            test,
            seed,
            scale,
            given,
        })
    }

    /// The seed for this test's generator.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The case-count multiplier (1 by default).
    pub fn scale(&self) -> u64 {
        self.scale
    }

    /// `base` cases, times the scale.
    pub fn cases(&self, base: usize) -> usize {
        base.saturating_mul(usize::try_from(self.scale).unwrap_or(usize::MAX))
    }

    /// How to run this test's cases again, for a failure message.
    pub fn replay(&self) -> String {
        match self.given {
            Some(given) => format!(
                "{}: replay with {SEED_VAR}={given} {SCALE_VAR}={}",
                self.test, self.scale
            ),
            None => format!(
                "{}: fixed seed {:#x}, scale {} (no {SEED_VAR} set)",
                self.test, self.seed, self.scale
            ),
        }
    }
}

impl Drop for Fuzz {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The test harness shows a failed test's captured output.
            #[allow(clippy::print_stderr)]
            {
                eprintln!("{}", self.replay());
            }
        }
    }
}

fn parse(var: &'static str, value: &str) -> Result<u64, FuzzEnvError> {
    value.trim().parse().map_err(|_| FuzzEnvError::NotANumber {
        var,
        value: value.to_string(),
    })
}

/// The randomized tests' generator (SplitMix64): small, and the same seed
/// gives the same cases on every machine, which a replay needs.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Usually seeded with [`Fuzz::seed`].
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let out = mix(self.0);
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        out
    }

    /// A number in `0..n`; `n` must not be 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `true` about once in `n` calls; `n` must not be 0.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// One of `items`, which must not be empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// SplitMix64's increment (2^64 divided by the golden ratio).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: nearby seeds give unrelated streams.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_keeps_the_fixed_seed_and_count() {
        let fuzz = Fuzz::new("t", 42, None, None).unwrap();
        assert_eq!((fuzz.seed(), fuzz.cases(600)), (42, 600));
    }

    #[test]
    fn a_given_seed_is_mixed_per_test_and_replays() {
        let a = Fuzz::new("a", 1, Some("7"), Some("3")).unwrap();
        let b = Fuzz::new("b", 2, Some("7"), Some("3")).unwrap();
        assert_ne!(a.seed(), 1);
        assert_ne!(a.seed(), b.seed());
        assert_eq!(a.seed(), Fuzz::new("a", 1, Some("7"), None).unwrap().seed());
        assert_eq!(a.cases(10), 30);
        assert!(a.replay().contains("RULES_FUZZ_SEED=7 RULES_FUZZ_SCALE=3"));
    }

    #[test]
    fn rng_is_splitmix64() {
        // The reference stream for seed 1234567 (the SplitMix64 paper's C
        // code); a change here would silently change every test's cases.
        let mut rng = Rng::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
        assert!((0..100).all(|_| rng.below(3) < 3));
    }

    #[test]
    fn bad_values_are_errors() {
        assert_eq!(
            Fuzz::new("t", 1, Some("x1"), None).unwrap_err(),
            FuzzEnvError::NotANumber {
                var: SEED_VAR,
                value: "x1".into()
            }
        );
        assert_eq!(
            Fuzz::new("t", 1, None, Some("0")).unwrap_err(),
            FuzzEnvError::ZeroScale
        );
    }
}
