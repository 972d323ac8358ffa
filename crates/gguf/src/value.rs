use std::collections::HashMap;

use crate::{GgufError, Result};

/// A metadata value. Arrays read from a file are homogeneous (GGUF stores one element type
/// per array), though nested arrays may differ from each other in length and element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
}

impl Value {
    /// The GGUF spelling of the type (`"u32"`, `"string"`, `"array"`), for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }

    /// The GGUF value type id (0..=12) written in files.
    pub fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(_) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }

    /// Any non-negative integer: writers disagree on the width of counts like `block_count`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer that fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// Any numeric value (integers convert, 64-bit ones possibly rounding).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::U64(v) => Some(v as f64),
            Value::I64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// `"array of u8"` etc., so a wrong-type error for an array says what it holds.
    fn array_type_name(elems: &[Value]) -> &'static str {
        match elems.first() {
            None => "empty array",
            Some(Value::U8(_)) => "array of u8",
            Some(Value::I8(_)) => "array of i8",
            Some(Value::U16(_)) => "array of u16",
            Some(Value::I16(_)) => "array of i16",
            Some(Value::U32(_)) => "array of u32",
            Some(Value::I32(_)) => "array of i32",
            Some(Value::U64(_)) => "array of u64",
            Some(Value::I64(_)) => "array of i64",
            Some(Value::F32(_)) => "array of f32",
            Some(Value::F64(_)) => "array of f64",
            Some(Value::Bool(_)) => "array of bool",
            Some(Value::String(_)) => "array of string",
            Some(Value::Array(_)) => "array of array",
        }
    }
}

/// Metadata key/value pairs in file order, with O(1) lookup by key.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces `key`; a replaced key keeps its original position.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Option<Value> {
        let key = key.into();
        if let Some(&i) = self.index.get(&key) {
            return Some(std::mem::replace(&mut self.entries[i].1, value));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        None
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_owned()))
    }

    fn wrong_type(key: &str, expected: &'static str, got: &Value) -> GgufError {
        let got = match got {
            Value::Array(a) => Value::array_type_name(a),
            v => v.type_name(),
        };
        GgufError::WrongType {
            key: key.to_owned(),
            expected,
            got,
        }
    }

    /// Any integer type, as long as the value fits.
    pub fn u32(&self, key: &str) -> Result<u32> {
        let v = self.require(key)?;
        let n = v
            .as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from));
        let n = n.ok_or_else(|| Self::wrong_type(key, "u32", v))?;
        u32::try_from(n).map_err(|_| GgufError::OutOfRange {
            key: key.to_owned(),
            value: n.to_string(),
            target: "u32",
        })
    }

    /// Any integer type, as long as the value is non-negative.
    pub fn u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        match (v.as_u64(), v.as_i64()) {
            (Some(n), _) => Ok(n),
            (None, Some(n)) => Err(GgufError::OutOfRange {
                key: key.to_owned(),
                value: n.to_string(),
                target: "u64",
            }),
            (None, None) => Err(Self::wrong_type(key, "u64", v)),
        }
    }

    /// Any numeric type, converted to `f32`.
    pub fn f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| Self::wrong_type(key, "f32", v))
    }

    pub fn bool(&self, key: &str) -> Result<bool> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| Self::wrong_type(key, "bool", v))
    }

    pub fn str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong_type(key, "string", v))
    }

    fn array(&self, key: &str, expected: &'static str) -> Result<&[Value]> {
        let v = self.require(key)?;
        v.as_array()
            .ok_or_else(|| Self::wrong_type(key, expected, v))
    }

    pub fn string_array(&self, key: &str) -> Result<Vec<&str>> {
        const EXPECTED: &str = "array of string";
        let a = self.array(key, EXPECTED)?;
        a.iter()
            .map(|e| {
                e.as_str()
                    .ok_or_else(|| Self::wrong_type(key, EXPECTED, &Value::Array(vec![e.clone()])))
            })
            .collect()
    }

    /// Elements of any numeric type, converted to `f32`.
    pub fn f32_array(&self, key: &str) -> Result<Vec<f32>> {
        const EXPECTED: &str = "array of f32";
        let a = self.array(key, EXPECTED)?;
        a.iter()
            .map(|e| {
                e.as_f64()
                    .map(|x| x as f32)
                    .ok_or_else(|| Self::wrong_type(key, EXPECTED, &Value::Array(vec![e.clone()])))
            })
            .collect()
    }

    /// Elements of any integer type, as long as each fits in an `i32`.
    pub fn i32_array(&self, key: &str) -> Result<Vec<i32>> {
        const EXPECTED: &str = "array of i32";
        let a = self.array(key, EXPECTED)?;
        a.iter()
            .enumerate()
            .map(|(i, e)| {
                let n = e
                    .as_i64()
                    .map(i128::from)
                    .or_else(|| e.as_u64().map(i128::from))
                    .ok_or_else(|| {
                        Self::wrong_type(key, EXPECTED, &Value::Array(vec![e.clone()]))
                    })?;
                i32::try_from(n).map_err(|_| GgufError::OutOfRange {
                    key: format!("{key}[{i}]"),
                    value: n.to_string(),
                    target: "i32",
                })
            })
            .collect()
    }

    pub fn bool_array(&self, key: &str) -> Result<Vec<bool>> {
        const EXPECTED: &str = "array of bool";
        let a = self.array(key, EXPECTED)?;
        a.iter()
            .map(|e| {
                e.as_bool()
                    .ok_or_else(|| Self::wrong_type(key, EXPECTED, &Value::Array(vec![e.clone()])))
            })
            .collect()
    }

    /// `general.architecture`, which selects the key prefix (`llama.block_count`) and the model code.
    pub fn architecture(&self) -> Result<&str> {
        self.str("general.architecture")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_accessors_convert_only_when_lossless_in_range() {
        assert_eq!(Value::I8(-1).as_u64(), None);
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U16(9).as_f64(), Some(9.0));
        assert_eq!(Value::Bool(true).as_f64(), None);
        assert_eq!(Value::String("x".into()).as_u64(), None);
    }

    #[test]
    fn typed_getters_report_missing_wrong_type_and_range() {
        let mut m = Metadata::new();
        m.insert("a", Value::U64(1 << 40));
        m.insert("b", Value::String("hi".into()));
        m.insert("c", Value::Array(vec![Value::U8(1)]));
        m.insert("d", Value::I32(-3));
        m.insert("e", Value::U8(5));
        assert!(matches!(m.u32("zz"), Err(GgufError::MissingKey(key)) if key == "zz"));
        assert!(matches!(m.u32("a"), Err(GgufError::OutOfRange { .. })));
        assert_eq!(m.u64("a").unwrap(), 1 << 40);
        assert!(matches!(m.u64("d"), Err(GgufError::OutOfRange { .. })));
        assert_eq!(m.u32("e").unwrap(), 5);
        assert_eq!(m.f32("e").unwrap(), 5.0);
        assert!(matches!(
            m.u32("b"),
            Err(GgufError::WrongType {
                expected: "u32",
                got: "string",
                ..
            })
        ));
        assert!(matches!(
            m.string_array("c"),
            Err(GgufError::WrongType {
                expected: "array of string",
                got: "array of u8",
                ..
            })
        ));
        assert_eq!(m.i32_array("c").unwrap(), vec![1]);
        assert!(matches!(m.architecture(), Err(GgufError::MissingKey(_))));
        // Replacing keeps the original position.
        m.insert("a", Value::Bool(true));
        assert_eq!(m.iter().next().unwrap(), ("a", &Value::Bool(true)));
        assert_eq!(m.len(), 5);
    }
}
