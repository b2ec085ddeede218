//! Dev-only help for the workspace's tests: [`fuzz`], the randomized
//! tests' seeds, case counts and generator (`cargo xtask fuzz`,
//! docs/fuzzing.md). Every crate takes it as a dev-dependency only, so the
//! product never reads the environment variables it reads (`cargo xtask
//! invariants` checks that no normal dependency tree holds it).

pub mod fuzz;
