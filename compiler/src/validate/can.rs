//! The `can` action (docs/rules.md#the-can-action): interface, id, data, rtr, dlc.

use super::checker::{entry, RuleChecker};
use crate::diagnostic::{Code, Diagnostic};
use crate::rulefile::Table;
use crate::span::StringMap;
use rulecore::bundle::{Action, CanFrame};
use std::borrow::Cow;
use std::ops::Range;
use toml::de::DeValue;

impl<'i> RuleChecker<'_, 'i> {
    /// docs/rules.md#the-can-action. Every key is checked, so every problem shows at once.
    pub(super) fn can(&mut self, step: &Table<'i>, header: &Range<usize>) -> Option<Action> {
        let iface = self.can_iface(step, header);
        let id = self.can_id(step, header);
        let data = self.can_data(step);
        let rtr = match self.boolean(step, "rtr") {
            Some((rtr, _)) => Some(rtr),
            None if entry(step, "rtr").is_some() => None,
            None => Some(false),
        };
        let dlc = self.can_dlc(step);
        // The payload rules need only `data`, `rtr` and `dlc`: checked even
        // when `iface` or `id` failed.
        let (data, dlc) = self.can_payload(data?, rtr?, dlc?)?;
        let (iface, id) = (iface?, id?);
        Some(Action::Can(CanFrame {
            iface,
            id,
            extended: id > 0x7FF,
            rtr: rtr?,
            dlc,
            data,
        }))
    }

    /// `iface`: 1 to 15 bytes, no white space, `/` or NUL.
    fn can_iface(&mut self, step: &Table<'i>, header: &Range<usize>) -> Option<String> {
        let (iface, span) = self.required_string(step, "iface", "can", header, "\"can0\"")?;
        let bad = iface
            .char_indices()
            .find(|(_, c)| c.is_whitespace() || *c == '/' || *c == '\0');
        if iface.len() > 15 {
            self.error_help(
                Code::CanIface,
                format!(
                    "interface name `{iface}` is {} bytes long; at most 15",
                    iface.len()
                ),
                span,
                "too long",
                "SocketCAN interface names are 1 to 15 bytes, e.g. `can0`",
            );
            return None;
        }
        if let Some((at, bad)) = bad {
            let what = match bad {
                '/' => "`/`".to_string(),
                '\0' => "a NUL byte".to_string(),
                ' ' => "a space".to_string(),
                other => format!("white space ({})", other.escape_unicode()),
            };
            let map = StringMap::new(&self.file.text, span, &iface);
            self.error_help(
                Code::CanIface,
                format!("interface name `{}` contains {what}", iface.escape_debug()),
                map.map(at..at + bad.len_utf8()),
                "white space, `/` and NUL are not allowed",
                "SocketCAN interface names look like `can0` or `vcan1`",
            );
            return None;
        }
        Some(iface)
    }

    /// `id`: required, hex (a decimal TOML integer warns), at most
    /// 0x1FFFFFFF.
    fn can_id(&mut self, step: &Table<'i>, header: &Range<usize>) -> Option<u32> {
        let Some(e) = entry(step, "id") else {
            self.missing(
                "id",
                header.clone(),
                "a `can` step needs the frame's `id`",
                "add e.g. `id = \"0x123\"`",
            );
            return None;
        };
        let span = e.value.span();
        let id = match e.value.get_ref() {
            DeValue::String(text) => self.can_id_hex(text, &span)?,
            DeValue::Integer(_) => self.can_id_integer(step, &span)?,
            _ => {
                self.wrong_type(
                    "id",
                    e.value,
                    "a hex string",
                    Some("write e.g. `id = \"0x123\"`"),
                );
                return None;
            }
        };
        if id > 0x1FFF_FFFF {
            self.error_help(
                Code::CanId,
                "`id` is larger than 0x1FFFFFFF".to_string(),
                span,
                "above the 29-bit extended range",
                "standard ids go up to 0x7FF, extended ids up to 0x1FFFFFFF",
            );
            return None;
        }
        u32::try_from(id).ok()
    }

    /// `id = "0x123"` (the `0x` is optional); too many digits saturate, to
    /// be reported as out of range.
    fn can_id_hex(&mut self, text: &str, span: &Range<usize>) -> Option<u64> {
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .unwrap_or(text);
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            self.error_help(
                Code::CanId,
                format!("`id` `{text}` is not hexadecimal"),
                span.clone(),
                "expected hex digits, optionally after `0x`",
                "write e.g. `id = \"0x123\"` (standard) or `id = \"0x18FF50E5\"` (extended)",
            );
            return None;
        }
        Some(u64::from_str_radix(digits, 16).unwrap_or(u64::MAX))
    }

    /// `id = 0x123` or `id = 291`: a TOML integer, not negative.
    fn can_id_integer(&mut self, step: &Table<'i>, span: &Range<usize>) -> Option<u64> {
        let (n, _) = self.integer(step, "id")?;
        if n < 0 {
            self.error_help(
                Code::CanId,
                format!("`id` is negative ({n})"),
                span.clone(),
                "negative id",
                "write e.g. `id = \"0x123\"`",
            );
            return None;
        }
        // `id = "123"` is hex (docs/rules.md#the-can-action), so a bare decimal `id = 123` is
        // easy to misread: say which number it is. TOML's own `0x123` is fine.
        let written = self.file.text.get(span.clone()).unwrap_or("");
        if n > 9 && !written.starts_with("0x") {
            self.push(
                Diagnostic::warning(
                    Code::CanIdDecimal,
                    format!("`id = {written}` is the decimal number {n}, that is 0x{n:X}"),
                )
                .at(span.clone(), "a decimal TOML integer")
                .with_help(format!(
                    "CAN ids are hex: if you meant 0x{written}, write `id = \"0x{written}\"`; \
                     to keep {n}, write `id = 0x{n:X}`"
                )),
            );
        }
        Some(u64::try_from(n).unwrap_or(u64::MAX))
    }

    /// `data`: `Some(None)` when absent, `None` on error.
    fn can_data(&mut self, step: &Table<'i>) -> Option<Option<(Vec<u8>, Range<usize>)>> {
        let Some((text, span)) = self.string(step, "data") else {
            return entry(step, "data").is_none().then_some(None);
        };
        match parse_can_data(&text) {
            Ok(bytes) => Some(Some((bytes, span))),
            Err(problem) => {
                let help = match respelled_can_data(&text) {
                    Some(fixed) => format!("write `data = \"{fixed}\"`: hex bytes without `0x`, separated by spaces (or none)"),
                    None => "write hex bytes, contiguous (`\"DEADBEEF\"`) or separated by spaces (`\"DE AD BE EF\"`), at most 8 bytes".to_string(),
                };
                self.error_help(
                    Code::CanData,
                    format!("`data` `{text}`: {problem}"),
                    span,
                    &problem,
                    &help,
                );
                None
            }
        }
    }

    /// `dlc`: `Some(None)` when absent, `None` on error.
    fn can_dlc(&mut self, step: &Table<'i>) -> Option<Option<(u8, Range<usize>)>> {
        let Some((dlc, span)) = self.integer(step, "dlc") else {
            return entry(step, "dlc").is_none().then_some(None);
        };
        match u8::try_from(dlc) {
            Ok(dlc) if dlc <= 8 => Some(Some((dlc, span))),
            _ => {
                self.error_help(
                    Code::CanDlc,
                    format!("`dlc` must be 0 to 8, found {dlc}"),
                    span,
                    "out of range",
                    "a classic CAN frame carries 0 to 8 bytes",
                );
                None
            }
        }
    }

    /// The frame's bytes and length: a remote frame has no `data` and takes
    /// its length from `dlc`; a data frame has no `dlc`.
    fn can_payload(
        &mut self,
        data: Option<(Vec<u8>, Range<usize>)>,
        rtr: bool,
        dlc: Option<(u8, Range<usize>)>,
    ) -> Option<(Vec<u8>, u8)> {
        if rtr {
            // Any `data` at all, even `""`: a remote frame has no payload
            // to write, so the key is a misunderstanding either way.
            if let Some((_, span)) = data {
                self.error_help(
                    Code::CanRtrData,
                    "a remote frame (`rtr = true`) carries no data".to_string(),
                    span,
                    "data on a remote frame",
                    "remove `data`, and use `dlc` for the length the remote frame requests",
                );
                return None;
            }
            return Some((Vec::new(), dlc.map_or(0, |(dlc, _)| dlc)));
        }
        if let Some((_, span)) = dlc {
            self.error_help(
                Code::CanDlc,
                "`dlc` is only for remote frames (`rtr = true`)".to_string(),
                span,
                "only with `rtr = true`",
                "a data frame's length is the length of `data`; remove `dlc`, or set `rtr = true`",
            );
            return None;
        }
        let bytes = data.map(|(bytes, _)| bytes).unwrap_or_default();
        let len = u8::try_from(bytes.len()).unwrap_or(u8::MAX);
        Some((bytes, len))
    }
}

/// CAN `data` (docs/rules.md#the-can-action): hex, either contiguous (even length) or byte
/// pairs separated by white space, at most 8 bytes, may be empty.
pub fn parse_can_data(text: &str) -> Result<Vec<u8>, String> {
    let groups: Vec<&str> = text.split_whitespace().collect();
    let pairs: Vec<Cow<'_, str>> = if groups.len() > 1 {
        if let Some(bad) = groups.iter().find(|g| g.len() != 2) {
            return Err(format!("`{bad}` is not one byte (two hex digits)"));
        }
        groups.into_iter().map(Cow::Borrowed).collect()
    } else {
        let joined = groups.first().copied().unwrap_or("");
        if let Some(bad) = joined.chars().find(|c| !c.is_ascii_hexdigit()) {
            return Err(format!("`{bad}` is not a hex digit"));
        }
        if joined.len() % 2 != 0 {
            return Err("odd number of hex digits".to_string());
        }
        (0..joined.len() / 2)
            .map(|i| Cow::Borrowed(joined.get(2 * i..2 * i + 2).unwrap_or("")))
            .collect()
    };
    let mut bytes = Vec::new();
    for pair in pairs {
        let byte = u8::from_str_radix(&pair, 16)
            .ok()
            .filter(|_| pair.chars().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| format!("`{pair}` is not hexadecimal"))?;
        bytes.push(byte);
    }
    if bytes.len() > 8 {
        return Err(format!(
            "{} bytes; a CAN frame carries at most 8",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// `data` as written in C or a CAN tool (`"0x01 0x02"`, `"01,02"`,
/// `"01:02"`), respelled the way `parse_can_data` reads it, when that is
/// all that is wrong.
fn respelled_can_data(text: &str) -> Option<String> {
    let groups: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ':' | '-' | ';'))
        .filter(|g| !g.is_empty())
        .map(|g| {
            g.strip_prefix("0x")
                .or_else(|| g.strip_prefix("0X"))
                .unwrap_or(g)
        })
        .collect();
    let fixed = groups.join(" ");
    let ok = (groups.len() == 1 || groups.iter().all(|g| g.len() == 2))
        && parse_can_data(&fixed).is_ok();
    (ok && fixed != text).then_some(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn can_data_forms() {
        assert_eq!(parse_can_data(""), Ok(vec![]));
        assert_eq!(parse_can_data("DEADbeef"), Ok(vec![0xDE, 0xAD, 0xBE, 0xEF]));
        assert_eq!(
            parse_can_data(" de ad  be\tef "),
            Ok(vec![0xDE, 0xAD, 0xBE, 0xEF])
        );
        assert!(parse_can_data("ABC").is_err());
        assert!(parse_can_data("AB C").is_err());
        assert!(parse_can_data("zz").is_err());
        assert!(parse_can_data("+1").is_err());
        assert!(parse_can_data("0102030405060708").is_ok());
        assert!(parse_can_data("010203040506070809").is_err());
        // A non-ASCII character must not panic on slicing, and is named.
        assert_eq!(parse_can_data("éé"), Err("`é` is not a hex digit".into()));
        assert_eq!(parse_can_data("0x12"), Err("`x` is not a hex digit".into()));
    }

    #[test]
    fn other_spellings_of_can_data_get_a_fix() {
        assert_eq!(respelled_can_data("0x01 0x02").as_deref(), Some("01 02"));
        assert_eq!(respelled_can_data("01,02, FF").as_deref(), Some("01 02 FF"));
        assert_eq!(respelled_can_data("01:02").as_deref(), Some("01 02"));
        assert_eq!(respelled_can_data("0x12").as_deref(), Some("12"));
        assert_eq!(respelled_can_data("0x0102").as_deref(), Some("0102"));
        // Nothing to respell, or respelling does not make it valid.
        assert_eq!(respelled_can_data("ABC"), None);
        assert_eq!(respelled_can_data("0x1"), None);
        assert_eq!(respelled_can_data("01 02 03 04 05 06 07 08 09"), None);
    }
}
