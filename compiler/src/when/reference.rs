//! The functions `when` has that evalexpr does not, written as evalexpr
//! functions (docs/when-language.md#functions): the string tests and the
//! conversions `int`, `float`, `str`. The checker registers them to
//! evaluate constant parts, and the differential test registers the same
//! ones, so evalexpr stays the reference for every function the VM runs.

use evalexpr::{DefaultNumericTypes, EvalexprError, Function, Value};

type Fn = Function<DefaultNumericTypes>;
type Error = EvalexprError<DefaultNumericTypes>;

/// Every function of `when` that is not an evalexpr built-in, by name.
pub fn functions() -> Vec<(&'static str, Fn)> {
    type StringTest = fn(&str, &str) -> bool;
    let tests: [(&str, StringTest); 3] = [
        ("str::starts_with", |a, b| a.starts_with(b)),
        ("str::ends_with", |a, b| a.ends_with(b)),
        ("str::contains", |a, b| a.contains(b)),
    ];
    let mut functions: Vec<(&'static str, Fn)> = tests
        .into_iter()
        .map(|(name, test)| {
            let function = Function::new(move |argument: &Value| {
                let arguments = argument.as_fixed_len_tuple(2)?;
                let (a, b) = (arguments[0].as_string()?, arguments[1].as_string()?);
                Ok(Value::Boolean(test(&a, &b)))
            });
            (name, function)
        })
        .collect();
    functions.push(("int", Function::new(int)));
    functions.push(("float", Function::new(float)));
    functions.push(("str", Function::new(str)));
    functions
}

fn conversion_error(function: &str, what: &str) -> Error {
    EvalexprError::CustomMessage(format!("`{function}` cannot convert {what}"))
}

/// `int(x)`: int as is, float truncated toward zero (in range), decimal
/// integer string with optional white space around.
fn int(argument: &Value) -> Result<Value, Error> {
    match argument {
        Value::Int(i) => Ok(Value::Int(*i)),
        Value::Float(f) => {
            let limit = -(i64::MIN as f64);
            if f.is_finite() && f.trunc() >= -limit && f.trunc() < limit {
                Ok(Value::Int(f.trunc() as i64))
            } else {
                Err(conversion_error("int", "a float outside the int range"))
            }
        }
        Value::String(s) => s
            .trim()
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|_| conversion_error("int", "a string that is not a decimal integer")),
        other => Err(EvalexprError::expected_number_or_string(other.clone())),
    }
}

/// `float(x)`: numbers converted, decimal strings parsed (no `inf`, `NaN`).
fn float(argument: &Value) -> Result<Value, Error> {
    match argument {
        Value::Int(i) => Ok(Value::Float(*i as f64)),
        Value::Float(f) => Ok(Value::Float(*f)),
        Value::String(s) => {
            let s = s.trim();
            let letters = s.chars().any(|c| c.is_alphabetic() && c != 'e' && c != 'E');
            match s.parse::<f64>() {
                Ok(f) if !letters => Ok(Value::Float(f)),
                _ => Err(conversion_error(
                    "float",
                    "a string that is not a decimal number",
                )),
            }
        }
        other => Err(EvalexprError::expected_number_or_string(other.clone())),
    }
}

/// `str(x)`: evalexpr's `str::from` for the scalars; an empty value (a
/// missing data key) is an error rather than evalexpr's `"()"`.
fn str(argument: &Value) -> Result<Value, Error> {
    match argument {
        Value::String(_) | Value::Int(_) | Value::Float(_) | Value::Boolean(_) => {
            Ok(Value::String(argument.str_from()))
        }
        other => Err(EvalexprError::type_error(
            other.clone(),
            vec![
                evalexpr::ValueType::String,
                evalexpr::ValueType::Int,
                evalexpr::ValueType::Float,
                evalexpr::ValueType::Boolean,
            ],
        )),
    }
}
