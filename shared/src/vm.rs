//! PLACEHOLDER until the VM lands: the signature the engine builds against.
use crate::bytecode::{Const, Program};
use crate::event::Event;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    #[error("the VM is not built yet")]
    NotBuilt,
}

/// Evaluates a `when` program to a boolean. `state` holds the shadow value
/// of each of the bundle's `state_pairs`, by index (`""` while unknown).
pub fn eval_bool(
    _program: &Program,
    _consts: &[Const],
    _event: &Event,
    _state: &[String],
) -> Result<bool, EvalError> {
    Err(EvalError::NotBuilt)
}
