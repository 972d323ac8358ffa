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
    /// A numeric or boolean array as the reader keeps it (see [`Packed`]).
    Packed(Packed),
}

/// A metadata array of numbers or booleans kept in its elements' own type: a file's
/// 16-million-element u8 array costs 16 MiB in memory, not the 512 MiB of as many
/// [`Value`]s. The reader returns every numeric or boolean array in this form.
#[derive(Clone, Debug, PartialEq)]
pub enum Packed {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
}

/// Runs `$body` with `$v` bound to the vector inside `$packed` and `$variant` naming the
/// matching scalar [`Value`] variant.
macro_rules! with_packed {
    ($packed:expr, |$v:ident, $variant:ident| $body:expr) => {
        match $packed {
            Packed::U8($v) => with_packed!(@ U8, $variant, $body),
            Packed::I8($v) => with_packed!(@ I8, $variant, $body),
            Packed::U16($v) => with_packed!(@ U16, $variant, $body),
            Packed::I16($v) => with_packed!(@ I16, $variant, $body),
            Packed::U32($v) => with_packed!(@ U32, $variant, $body),
            Packed::I32($v) => with_packed!(@ I32, $variant, $body),
            Packed::U64($v) => with_packed!(@ U64, $variant, $body),
            Packed::I64($v) => with_packed!(@ I64, $variant, $body),
            Packed::F32($v) => with_packed!(@ F32, $variant, $body),
            Packed::F64($v) => with_packed!(@ F64, $variant, $body),
            Packed::Bool($v) => with_packed!(@ Bool, $variant, $body),
        }
    };
    (@ $name:ident, $variant:ident, $body:expr) => {{
        #[allow(unused_imports)]
        use Value::$name as $variant;
        $body
    }};
}

impl Packed {
    pub fn len(&self) -> usize {
        with_packed!(self, |v, _V| v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a scalar [`Value`].
    pub fn get(&self, i: usize) -> Option<Value> {
        with_packed!(self, |v, V| v.get(i).map(|&x| V(x)))
    }

    pub fn iter(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The GGUF type id of the elements.
    pub fn element_type_id(&self) -> u32 {
        with_packed!(self, |v, V| v
            .first()
            .map_or_else(|| V(Default::default()).type_id(), |&x| V(x).type_id()))
    }

    /// Bytes the elements take in memory (and in a file).
    pub fn bytes(&self) -> usize {
        with_packed!(self, |v, _V| std::mem::size_of_val(v.as_slice()))
    }

    /// The array's elements little-endian, as a GGUF file stores them.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            Packed::U8(v) => v.clone(),
            Packed::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
            Packed::I8(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Packed::U16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Packed::I16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Packed::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Packed::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Packed::U64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Packed::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Packed::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Packed::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// `items` packed, when they are one numeric or boolean type.
    fn from_values(items: &[Value]) -> Option<Packed> {
        macro_rules! all {
            ($variant:ident) => {
                items
                    .iter()
                    .map(|v| match v {
                        Value::$variant(x) => Some(*x),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .map(Packed::$variant)
            };
        }
        match items.first()? {
            Value::U8(_) => all!(U8),
            Value::I8(_) => all!(I8),
            Value::U16(_) => all!(U16),
            Value::I16(_) => all!(I16),
            Value::U32(_) => all!(U32),
            Value::I32(_) => all!(I32),
            Value::U64(_) => all!(U64),
            Value::I64(_) => all!(I64),
            Value::F32(_) => all!(F32),
            Value::F64(_) => all!(F64),
            Value::Bool(_) => all!(Bool),
            _ => None,
        }
    }
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
            Value::Array(_) | Value::Packed(_) => "array",
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
            Value::Array(_) | Value::Packed(_) => 9,
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

    /// The elements of an [`Value::Array`] (strings, arrays); see [`Value::elements`] for
    /// arrays of any kind.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The elements of either kind of array, one [`Value`] each.
    pub fn elements(&self) -> Option<Box<dyn Iterator<Item = Value> + '_>> {
        match self {
            Value::Array(a) => Some(Box::new(a.iter().cloned())),
            Value::Packed(p) => Some(Box::new(p.iter())),
            _ => None,
        }
    }

    /// Elements in either kind of array.
    pub fn array_len(&self) -> Option<usize> {
        match self {
            Value::Array(a) => Some(a.len()),
            Value::Packed(p) => Some(p.len()),
            _ => None,
        }
    }

    /// The value as the reader returns it: numeric and boolean arrays, nested ones too,
    /// packed; an empty array as u8, the type the writer gives it.
    pub fn packed(self) -> Value {
        match self {
            Value::Array(items) if items.is_empty() => Value::Packed(Packed::U8(Vec::new())),
            Value::Array(items) => match Packed::from_values(&items) {
                Some(p) => Value::Packed(p),
                None => Value::Array(items.into_iter().map(Value::packed).collect()),
            },
            v => v,
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
            Some(Value::Array(_) | Value::Packed(_)) => "array of array",
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
            Value::Packed(p) => p.get(0).map_or("empty array", |first| {
                Value::array_type_name(std::slice::from_ref(&first))
            }),
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

    fn elements(
        &self,
        key: &str,
        expected: &'static str,
    ) -> Result<Box<dyn Iterator<Item = Value> + '_>> {
        let v = self.require(key)?;
        v.elements()
            .ok_or_else(|| Self::wrong_type(key, expected, v))
    }

    pub fn string_array(&self, key: &str) -> Result<Vec<&str>> {
        const EXPECTED: &str = "array of string";
        let v = self.require(key)?;
        let a = match v {
            Value::Array(a) => a.as_slice(),
            // Writers give an empty array some element type, u8 as often as not.
            Value::Packed(p) if p.is_empty() => &[],
            _ => return Err(Self::wrong_type(key, EXPECTED, v)),
        };
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
        if let Some(Value::Packed(Packed::F32(v))) = self.get(key) {
            return Ok(v.clone());
        }
        self.elements(key, EXPECTED)?
            .map(|e| {
                e.as_f64()
                    .map(|x| x as f32)
                    .ok_or_else(|| Self::wrong_type(key, EXPECTED, &Value::Array(vec![e])))
            })
            .collect()
    }

    /// Elements of any integer type, as long as each fits in an `i32`.
    pub fn i32_array(&self, key: &str) -> Result<Vec<i32>> {
        const EXPECTED: &str = "array of i32";
        if let Some(Value::Packed(Packed::I32(v))) = self.get(key) {
            return Ok(v.clone());
        }
        self.elements(key, EXPECTED)?
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
        self.elements(key, EXPECTED)?
            .map(|e| {
                e.as_bool()
                    .ok_or_else(|| Self::wrong_type(key, EXPECTED, &Value::Array(vec![e])))
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
