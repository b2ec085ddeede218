//! A run's id, `<rule>#<epoch>-<n>` (docs/semantics.md#durability-and-replay),
//! built on the stack and allocated once, as the shared string every
//! effect and note of the run holds: starting a run is on the event path
//! (docs/engine.md#the-48-mb-box), and `format!` would allocate twice.

use std::sync::Arc;

/// Room for a rule name and an epoch of 100 bytes together beside a
/// 20-digit number; a longer id takes the slower path.
const ON_STACK: usize = 128;

/// `<name>#<epoch>-<n>`.
pub(crate) fn run_id(name: &str, epoch: &str, n: u64) -> Arc<str> {
    let mut buffer = [0u8; ON_STACK];
    let mut len = 0;
    let mut put = |bytes: &[u8]| -> bool {
        let Some(room) = buffer.get_mut(len..len + bytes.len()) else {
            return false;
        };
        room.copy_from_slice(bytes);
        len += bytes.len();
        true
    };
    let mut digits = [0u8; 20];
    let fits = put(name.as_bytes())
        && put(b"#")
        && put(epoch.as_bytes())
        && put(b"-")
        && put(decimal(n, &mut digits));
    match std::str::from_utf8(&buffer[..len]) {
        Ok(id) if fits => Arc::from(id),
        _ => format!("{name}#{epoch}-{n}").into(),
    }
}

/// `value` in decimal, written at the end of `digits`.
fn decimal(mut value: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &digits[start..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_format() {
        for (name, epoch, n) in [
            ("hazards-on-alarm", "1712345678", 1),
            ("r", "0", 0),
            ("r", "18446744073709551615", u64::MAX),
            ("ünïcode-rule", "42", 1_000_000),
        ] {
            assert_eq!(&*run_id(name, epoch, n), format!("{name}#{epoch}-{n}"));
        }
        let long = "x".repeat(200);
        assert_eq!(&*run_id(&long, "7", 9), format!("{long}#7-9"));
        let edge = "y".repeat(ON_STACK - 4);
        assert_eq!(&*run_id(&edge, "7", 9), format!("{edge}#7-9"));
    }
}
