//! An event's `data` (docs/events.md), parsed once into a compact form
//! that `when` reads fast (docs/engine.md#the-48-mb-box): every object is a
//! boxed slice of `(key, value)` sorted by key, a key of up to
//! [`INLINE_KEY`] bytes held inline (no allocation), every string value a
//! `Box<str>`.
//!
//! It holds any JSON value (an input's `data.payload` may be one), and
//! writes back exactly the JSON `serde_json::Value` would: keys in sorted
//! order, a repeated key keeping its last value, integers beyond `i64` as
//! unsigned, floats as floats.

use crate::small_str::SmallStr;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use std::fmt;

/// One JSON value of an event's `data`.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum DataValue {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    /// An integer beyond `i64::MAX`: `when` reads it as a float, as
    /// `serde_json` does, and it is written back unchanged.
    UInt(u64),
    Float(f64),
    Str(Box<str>),
    Array(Box<[DataValue]>),
    Object(DataObject),
}

/// The longest key held inline in an object's entry: a key is a
/// [`SmallStr`], like the envelope's strings.
pub const INLINE_KEY: usize = crate::small_str::INLINE_LEN;

/// The bytes one object entry takes in its object's slice.
pub const ENTRY_BYTES: usize = std::mem::size_of::<(SmallStr, DataValue)>();

/// The most entries of an object sorted through an index array on the
/// stack.
const SMALL_OBJECT: usize = 16;

/// A JSON object: its entries sorted by key, each key once.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DataObject {
    entries: Box<[(SmallStr, DataValue)]>,
}

impl DataObject {
    /// Sorts `entries` by key; of a repeated key the last one stays, as
    /// when a JSON object is read into a map.
    pub fn from_entries<K: AsRef<str>>(entries: Vec<(K, DataValue)>) -> Self {
        let entries = entries
            .into_iter()
            .map(|(k, v)| (SmallStr::new(k.as_ref()), v))
            .collect();
        Self::from_keyed(entries)
    }

    fn from_keyed(mut entries: Vec<(SmallStr, DataValue)>) -> Self {
        Self::from_read(&mut entries)
    }

    /// Takes the entries out of `read` (an object as read, in input
    /// order) into an object of exactly their number: sorted by key, the
    /// last of a repeated key kept. One allocation, none for `{}`.
    pub(crate) fn from_read(read: &mut [(SmallStr, DataValue)]) -> Self {
        // The order, as indices: sorting them moves bytes, not entries.
        // Stable, so equal keys keep their input order and the last of a
        // run is the one written last. A short slice sorts without
        // allocating.
        let key = |at: usize| read.get(at).map_or(&[][..], |entry| entry.0.as_bytes());
        if read.len() <= SMALL_OBJECT {
            let mut order = [0u8; SMALL_OBJECT];
            for (at, slot) in order.iter_mut().enumerate() {
                *slot = at as u8;
            }
            let order = order.get_mut(..read.len()).unwrap_or_default();
            order.sort_by(|&a, &b| key(a.into()).cmp(key(b.into())));
            Self::take_in_order(read, order.iter().map(|&at| usize::from(at)))
        } else {
            let mut order: Vec<usize> = (0..read.len()).collect();
            order.sort_by(|&a, &b| key(a).cmp(key(b)));
            Self::take_in_order(read, order.into_iter())
        }
    }

    /// Takes the entries of `read` out in `order` (sorted by key), the
    /// last of a repeated key kept.
    fn take_in_order(
        read: &mut [(SmallStr, DataValue)],
        order: impl Iterator<Item = usize>,
    ) -> Self {
        let mut entries = Vec::with_capacity(read.len());
        let mut order = order.peekable();
        while let Some(at) = order.next() {
            let key = |at: usize| read.get(at).map(|entry| &entry.0);
            let superseded = order.peek().is_some_and(|&next| key(next) == key(at));
            if let (false, Some(entry)) = (superseded, read.get_mut(at)) {
                entries.push(std::mem::take(entry));
            }
        }
        Self {
            entries: entries.into_boxed_slice(),
        }
    }

    /// The value under `key`. Objects in events are small: a scan (a
    /// slice comparison checks the lengths first) beats a binary search
    /// until a dozen keys.
    #[inline(always)]
    pub fn get(&self, key: &str) -> Option<&DataValue> {
        if self.entries.len() <= 12 {
            let key = key.as_bytes();
            return self
                .entries
                .iter()
                .find(|(k, _)| k.as_bytes() == key)
                .map(|(_, v)| v);
        }
        let at = self
            .entries
            .binary_search_by(|(k, _)| k.as_bytes().cmp(key.as_bytes()))
            .ok()?;
        self.entries.get(at).map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in key order.
    pub fn iter(&self) -> Entries<'_> {
        Entries(self.entries.iter())
    }
}

/// The iterator over an object's entries, in key order.
#[derive(Debug)]
pub struct Entries<'a>(std::slice::Iter<'a, (SmallStr, DataValue)>);

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, &'a DataValue);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.as_str(), v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<'a> IntoIterator for &'a DataObject {
    type Item = (&'a str, &'a DataValue);
    type IntoIter = Entries<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl DataValue {
    pub fn is_null(&self) -> bool {
        matches!(self, DataValue::Null)
    }

    pub fn is_object(&self) -> bool {
        matches!(self, DataValue::Object(_))
    }

    pub fn as_object(&self) -> Option<&DataObject> {
        match self {
            DataValue::Object(object) => Some(object),
            _ => None,
        }
    }

    /// Builds an object from `(key, value)` pairs.
    pub fn object<K: AsRef<str>>(entries: impl IntoIterator<Item = (K, DataValue)>) -> Self {
        DataValue::Object(DataObject::from_entries(entries.into_iter().collect()))
    }

    /// The same value as a `serde_json::Value`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            DataValue::Null => Value::Null,
            DataValue::Bool(b) => Value::Bool(*b),
            DataValue::Int(i) => Value::from(*i),
            DataValue::UInt(u) => Value::from(*u),
            // A float from JSON is finite; a non-finite one is null, as
            // `serde_json` writes it.
            DataValue::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
            }
            DataValue::Str(s) => Value::String(s.to_string()),
            DataValue::Array(items) => Value::Array(items.iter().map(Self::to_json).collect()),
            DataValue::Object(object) => Value::Object(
                object
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

impl From<&serde_json::Value> for DataValue {
    fn from(value: &serde_json::Value) -> Self {
        use serde_json::Value;
        match value {
            Value::Null => DataValue::Null,
            Value::Bool(b) => DataValue::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => DataValue::Int(i),
                (None, Some(u), _) => DataValue::UInt(u),
                (None, None, Some(f)) => DataValue::Float(f),
                (None, None, None) => DataValue::Null,
            },
            Value::String(s) => DataValue::Str(s.as_str().into()),
            Value::Array(items) => DataValue::Array(items.iter().map(Self::from).collect()),
            Value::Object(map) => DataValue::Object(DataObject {
                // A `serde_json::Map` is already sorted and unique.
                entries: map
                    .iter()
                    .map(|(k, v)| (SmallStr::new(k), Self::from(v)))
                    .collect(),
            }),
        }
    }
}

impl From<serde_json::Value> for DataValue {
    fn from(value: serde_json::Value) -> Self {
        Self::from(&value)
    }
}

impl Serialize for DataValue {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            DataValue::Null => serializer.serialize_unit(),
            DataValue::Bool(b) => serializer.serialize_bool(*b),
            DataValue::Int(i) => serializer.serialize_i64(*i),
            DataValue::UInt(u) => serializer.serialize_u64(*u),
            DataValue::Float(f) => serializer.serialize_f64(*f),
            DataValue::Str(s) => serializer.serialize_str(s),
            DataValue::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items.iter() {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            DataValue::Object(object) => {
                let mut map = serializer.serialize_map(Some(object.len()))?;
                for (key, value) in object.iter() {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for DataValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DataVisitor)
    }
}

/// Reads any JSON value straight into a [`DataValue`], with no
/// `serde_json::Value` in between.
struct DataVisitor;

impl<'de> Visitor<'de> for DataVisitor {
    type Value = DataValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<DataValue, E> {
        Ok(DataValue::Null)
    }
    fn visit_none<E>(self) -> Result<DataValue, E> {
        Ok(DataValue::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<DataValue, D::Error> {
        DataValue::deserialize(d)
    }
    fn visit_bool<E>(self, b: bool) -> Result<DataValue, E> {
        Ok(DataValue::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<DataValue, E> {
        Ok(DataValue::Int(i))
    }
    fn visit_u64<E>(self, u: u64) -> Result<DataValue, E> {
        Ok(i64::try_from(u).map_or(DataValue::UInt(u), DataValue::Int))
    }
    fn visit_f64<E>(self, f: f64) -> Result<DataValue, E> {
        Ok(DataValue::Float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<DataValue, E> {
        Ok(DataValue::Str(s.into()))
    }
    fn visit_string<E>(self, s: String) -> Result<DataValue, E> {
        Ok(DataValue::Str(s.into_boxed_str()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DataValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(DataValue::Array(items.into_boxed_slice()))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DataValue, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(key) = map.next_key::<SmallStr>()? {
            entries.push((key, map.next_value()?));
        }
        Ok(DataValue::Object(DataObject::from_keyed(entries)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_like_serde_json_value() {
        let text = r#"{"z":1,"a":{"y":[1,-2,3.5,"s",null,true]},"big":18446744073709551615,"a":{"k":2},"f":1e20,"neg":-7}"#;
        let ours: DataValue = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        let theirs: serde_json::Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        let written = serde_json::to_string(&ours).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, theirs.to_string());
        assert_eq!(ours.to_json(), theirs);
        assert_eq!(DataValue::from(&theirs), ours);
        assert_eq!(
            ours.as_object().and_then(|o| o.get("big")),
            Some(&DataValue::UInt(u64::MAX))
        );
        assert_eq!(
            ours.as_object().and_then(|o| o.get("neg")),
            Some(&DataValue::Int(-7))
        );
    }

    #[test]
    fn looks_up_small_and_large_objects() {
        let big: serde_json::Map<String, serde_json::Value> =
            (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
        let big = DataValue::from(serde_json::Value::Object(big));
        let object = big.as_object().unwrap_or_else(|| panic!("an object"));
        for i in 0..40 {
            assert_eq!(object.get(&format!("k{i}")), Some(&DataValue::Int(i)));
        }
        assert_eq!(object.get("k40"), None);
        let small = DataValue::object([("b", DataValue::Int(1)), ("a", DataValue::Null)]);
        assert_eq!(small.to_json(), json!({"a": null, "b": 1}));
        let long = "k".repeat(INLINE_KEY + 1);
        let edge = "é".repeat(INLINE_KEY / 2);
        let keys = DataValue::object([
            (long.as_str(), DataValue::Int(1)),
            (edge.as_str(), DataValue::Int(2)),
        ]);
        let object = keys.as_object().unwrap_or_else(|| panic!("an object"));
        assert_eq!(object.get(&long), Some(&DataValue::Int(1)));
        assert_eq!(object.get(&edge), Some(&DataValue::Int(2)));
        let names: Vec<&str> = object.iter().map(|(k, _)| k).collect();
        assert_eq!(names, [long.as_str(), edge.as_str()], "sorted as bytes");
    }
}
