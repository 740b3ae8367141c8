//! GGUF metadata values and typed access to them.

use std::collections::BTreeMap;

use crate::{Error, Result};

/// One metadata value as stored in GGUF.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum MetaValue {
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
    Str(String),
    Array(MetaArray),
}

/// A typed GGUF array (kept typed so a 262k-entry vocabulary costs what its data costs).
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum MetaArray {
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
    Str(Vec<String>),
    /// Arrays of arrays (rare; allowed by the format).
    Array(Vec<MetaArray>),
}

impl MetaArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::Str(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }
    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl MetaValue {
    /// The GGUF type name, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F32(_) => "f32",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::Str(_) => "string",
            MetaValue::Array(_) => "array",
        }
    }

    /// Any integer value as i128 (exact for every GGUF integer type).
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            MetaValue::U8(v) => v as i128,
            MetaValue::I8(v) => v as i128,
            MetaValue::U16(v) => v as i128,
            MetaValue::I16(v) => v as i128,
            MetaValue::U32(v) => v as i128,
            MetaValue::I32(v) => v as i128,
            MetaValue::U64(v) => v as i128,
            MetaValue::I64(v) => v as i128,
            MetaValue::Bool(v) => v as i128,
            _ => return None,
        })
    }

    /// Any numeric value as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v as f64),
            MetaValue::F64(v) => Some(v),
            _ => self.as_int().map(|v| v as f64),
        }
    }
}

/// The metadata of a GGUF file: key → value, with typed getters that give clear errors.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    map: BTreeMap<String, MetaValue>,
}

impl Metadata {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }
    /// Insert or replace a value.
    pub fn insert(&mut self, key: impl Into<String>, value: MetaValue) {
        self.map.insert(key.into(), value);
    }
    /// The raw value, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.map.get(key)
    }
    /// Whether the key is present.
    pub fn contains(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }
    /// All entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &MetaValue)> {
        self.map.iter()
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn require(&self, key: &str) -> Result<&MetaValue> {
        self.map.get(key).ok_or_else(|| Error::MissingMetadata(key.to_string()))
    }

    /// An integer that must fit `u64`; an error if absent, not an integer, or negative.
    pub fn u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        let i = v.as_int().ok_or_else(|| {
            Error::bad_metadata(key, format!("expected an integer, found {}", v.type_name()))
        })?;
        u64::try_from(i).map_err(|_| Error::bad_metadata(key, format!("{i} is out of range")))
    }
    /// An integer that must fit `u32`.
    pub fn u32(&self, key: &str) -> Result<u32> {
        let v = self.u64(key)?;
        u32::try_from(v).map_err(|_| Error::bad_metadata(key, format!("{v} is out of range")))
    }
    /// Like [`Metadata::u32`] but `None` when absent.
    pub fn u32_opt(&self, key: &str) -> Result<Option<u32>> {
        if self.contains(key) {
            self.u32(key).map(Some)
        } else {
            Ok(None)
        }
    }
    /// A float (any numeric type is accepted).
    pub fn f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| Error::bad_metadata(key, format!("expected a number, found {}", v.type_name())))
    }
    /// Like [`Metadata::f32`] but `None` when absent.
    pub fn f32_opt(&self, key: &str) -> Result<Option<f32>> {
        if self.contains(key) {
            self.f32(key).map(Some)
        } else {
            Ok(None)
        }
    }
    /// A boolean (integers 0/1 accepted too).
    pub fn bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.map.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => match v.as_int() {
                Some(0) => Ok(Some(false)),
                Some(1) => Ok(Some(true)),
                _ => Err(Error::bad_metadata(key, format!("expected a bool, found {}", v.type_name()))),
            },
        }
    }
    /// A string.
    pub fn str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            MetaValue::Str(s) => Ok(s),
            v => Err(Error::bad_metadata(key, format!("expected a string, found {}", v.type_name()))),
        }
    }
    /// Like [`Metadata::str`] but `None` when absent.
    pub fn str_opt(&self, key: &str) -> Result<Option<&str>> {
        if self.contains(key) {
            self.str(key).map(Some)
        } else {
            Ok(None)
        }
    }
    /// An array of any element type.
    pub fn array(&self, key: &str) -> Result<&MetaArray> {
        match self.require(key)? {
            MetaValue::Array(a) => Ok(a),
            v => Err(Error::bad_metadata(key, format!("expected an array, found {}", v.type_name()))),
        }
    }
    /// An array of strings.
    pub fn str_array(&self, key: &str) -> Result<&[String]> {
        match self.array(key)? {
            MetaArray::Str(v) => Ok(v),
            _ => Err(Error::bad_metadata(key, "expected an array of strings")),
        }
    }
    /// An array of f32.
    pub fn f32_array(&self, key: &str) -> Result<&[f32]> {
        match self.array(key)? {
            MetaArray::F32(v) => Ok(v),
            _ => Err(Error::bad_metadata(key, "expected an array of f32")),
        }
    }
    /// An array of integers, converted to i64 (token types, per-layer head counts, ...).
    pub fn int_array(&self, key: &str) -> Result<Vec<i64>> {
        let bad = || Error::bad_metadata(key, "expected an array of integers");
        Ok(match self.array(key)? {
            MetaArray::U8(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::I8(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::U16(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::I16(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::U32(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::I32(v) => v.iter().map(|&x| x as i64).collect(),
            MetaArray::I64(v) => v.clone(),
            MetaArray::U64(v) => {
                v.iter().map(|&x| i64::try_from(x).map_err(|_| bad())).collect::<Result<_>>()?
            }
            _ => return Err(bad()),
        })
    }
}
