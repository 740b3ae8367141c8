//! A streaming GGUF (v3) writer: header and tensor infos up front, then tensor bytes in any
//! chunking, padding inserted between tensors. Used by tests and for synthetic models.

use std::collections::HashSet;
use std::io::Write;

use super::format::{self, value_type as vt};
use super::{MetaArray, MetaValue, Metadata};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// A tensor to be written: name, shape in ggml order (`dims[0]` is the row length), type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Shape in ggml order.
    pub dims: Vec<u64>,
    /// Storage type.
    pub dtype: GgmlType,
}

impl TensorSpec {
    /// A spec from parts.
    pub fn new(name: impl Into<String>, dims: &[u64], dtype: GgmlType) -> Self {
        Self { name: name.into(), dims: dims.to_vec(), dtype }
    }

    /// Bytes of data, validating the shape the way the reader does.
    pub fn n_bytes(&self) -> Result<u64> {
        let bad = |m: String| Error::BadTensor { tensor: self.name.clone(), message: m };
        if self.dims.is_empty() || self.dims.len() > format::MAX_DIMS {
            return Err(bad(format!("{} dimensions (must be 1 to {})", self.dims.len(), format::MAX_DIMS)));
        }
        let mut n = 1u64;
        for &d in &self.dims {
            if d == 0 || d > i64::MAX as u64 {
                return Err(bad(format!("dimension {d} is out of range")));
            }
            n = n
                .checked_mul(d)
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or_else(|| bad("too many elements".into()))?;
        }
        let row = self.dtype.row_bytes(self.dims[0]).map_err(|e| bad(e.to_string()))?;
        row.checked_mul(n / self.dims[0]).ok_or_else(|| bad("byte size overflows".into()))
    }
}

/// Writes a GGUF file front to back.
#[derive(Debug)]
pub struct GgufWriter<W: Write> {
    w: W,
    /// Bytes written so far (for padding).
    pos: u64,
    alignment: u64,
    names: Vec<String>,
    sizes: Vec<u64>,
    /// Tensor being written and bytes of it written.
    cur: usize,
    within: u64,
}

impl<W: Write> GgufWriter<W> {
    /// Write the header, `metadata` and the tensor infos (offsets assigned in declared order),
    /// and pad to the data section. The alignment is `general.alignment` if present, else 32.
    pub fn new(w: W, metadata: &Metadata, tensors: &[TensorSpec]) -> Result<Self> {
        let alignment = match metadata.get(format::ALIGNMENT_KEY) {
            None => format::DEFAULT_ALIGNMENT,
            Some(v) => match v.as_int() {
                Some(a) if a > 0 && a <= u32::MAX as i128 && (a as u64).is_power_of_two() => a as u64,
                _ => {
                    return Err(Error::bad_metadata(
                        format::ALIGNMENT_KEY,
                        "must be a power of two that fits u32",
                    ))
                }
            },
        };
        let mut seen = HashSet::new();
        let mut sizes = Vec::with_capacity(tensors.len());
        for t in tensors {
            if !seen.insert(t.name.as_str()) {
                return Err(Error::BadTensor {
                    tensor: t.name.clone(),
                    message: "duplicate tensor name".into(),
                });
            }
            sizes.push(t.n_bytes()?);
        }
        let mut out = Self {
            w,
            pos: 0,
            alignment,
            names: tensors.iter().map(|t| t.name.clone()).collect(),
            sizes,
            cur: 0,
            within: 0,
        };
        out.put(&format::MAGIC)?;
        out.put(&format::VERSION.to_le_bytes())?;
        out.put(&(tensors.len() as u64).to_le_bytes())?;
        out.put(&(metadata.len() as u64).to_le_bytes())?;
        for (key, value) in metadata.iter() {
            out.string(key)?;
            out.value(value)?;
        }
        let mut offset = 0u64;
        for (i, t) in tensors.iter().enumerate() {
            let size = out.sizes[i];
            out.string(&t.name)?;
            out.put(&(t.dims.len() as u32).to_le_bytes())?;
            for &d in &t.dims {
                out.put(&d.to_le_bytes())?;
            }
            out.put(&t.dtype.id().to_le_bytes())?;
            out.put(&offset.to_le_bytes())?;
            offset = offset
                .checked_add(size)
                .and_then(|e| format::align_up(e, alignment))
                .ok_or_else(|| Error::InvalidArgument("tensor data exceeds 2^64 bytes".into()))?;
        }
        out.pad()?;
        Ok(out)
    }

    /// Append tensor data: the tensors' bytes in declared order, split any way.
    pub fn write_tensor_data(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let Some(&size) = self.sizes.get(self.cur) else {
                return Err(Error::InvalidArgument(format!(
                    "{} bytes of tensor data past the last declared tensor",
                    bytes.len()
                )));
            };
            let n = (size - self.within).min(bytes.len() as u64) as usize;
            self.put(&bytes[..n])?;
            bytes = &bytes[n..];
            self.within += n as u64;
            if self.within == size {
                self.pad()?;
                self.cur += 1;
                self.within = 0;
            }
        }
        Ok(())
    }

    /// Flush and return the sink; an error if a declared tensor is incomplete.
    pub fn finish(mut self) -> Result<W> {
        if let Some(&size) = self.sizes.get(self.cur) {
            return Err(Error::InvalidArgument(format!(
                "tensor '{}' is incomplete: {} of {size} bytes written ({} of {} tensors complete)",
                self.names[self.cur],
                self.within,
                self.cur,
                self.sizes.len()
            )));
        }
        self.w.flush().map_err(|e| Error::io("flushing GGUF", e))?;
        Ok(self.w)
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.w.write_all(b).map_err(|e| Error::io("writing GGUF", e))?;
        self.pos += b.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> Result<()> {
        let n = format::align_up(self.pos, self.alignment).unwrap_or(self.pos) - self.pos;
        const ZEROS: [u8; 64] = [0; 64];
        let mut left = n;
        while left > 0 {
            let k = left.min(64) as usize;
            self.put(&ZEROS[..k])?;
            left -= k as u64;
        }
        Ok(())
    }

    fn string(&mut self, s: &str) -> Result<()> {
        self.put(&(s.len() as u64).to_le_bytes())?;
        self.put(s.as_bytes())
    }

    fn value(&mut self, v: &MetaValue) -> Result<()> {
        let (t, bytes): (u32, Vec<u8>) = match v {
            MetaValue::U8(x) => (vt::U8, x.to_le_bytes().to_vec()),
            MetaValue::I8(x) => (vt::I8, x.to_le_bytes().to_vec()),
            MetaValue::U16(x) => (vt::U16, x.to_le_bytes().to_vec()),
            MetaValue::I16(x) => (vt::I16, x.to_le_bytes().to_vec()),
            MetaValue::U32(x) => (vt::U32, x.to_le_bytes().to_vec()),
            MetaValue::I32(x) => (vt::I32, x.to_le_bytes().to_vec()),
            MetaValue::U64(x) => (vt::U64, x.to_le_bytes().to_vec()),
            MetaValue::I64(x) => (vt::I64, x.to_le_bytes().to_vec()),
            MetaValue::F32(x) => (vt::F32, x.to_le_bytes().to_vec()),
            MetaValue::F64(x) => (vt::F64, x.to_le_bytes().to_vec()),
            MetaValue::Bool(x) => (vt::BOOL, vec![*x as u8]),
            MetaValue::Str(s) => {
                self.put(&vt::STRING.to_le_bytes())?;
                return self.string(s);
            }
            MetaValue::Array(a) => {
                self.put(&vt::ARRAY.to_le_bytes())?;
                return self.array(a);
            }
        };
        self.put(&t.to_le_bytes())?;
        self.put(&bytes)
    }

    /// Element type, count, elements.
    fn array(&mut self, a: &MetaArray) -> Result<()> {
        let t = match a {
            MetaArray::U8(_) => vt::U8,
            MetaArray::I8(_) => vt::I8,
            MetaArray::U16(_) => vt::U16,
            MetaArray::I16(_) => vt::I16,
            MetaArray::U32(_) => vt::U32,
            MetaArray::I32(_) => vt::I32,
            MetaArray::U64(_) => vt::U64,
            MetaArray::I64(_) => vt::I64,
            MetaArray::F32(_) => vt::F32,
            MetaArray::F64(_) => vt::F64,
            MetaArray::Bool(_) => vt::BOOL,
            MetaArray::Str(_) => vt::STRING,
            MetaArray::Array(_) => vt::ARRAY,
        };
        self.put(&t.to_le_bytes())?;
        self.put(&(a.len() as u64).to_le_bytes())?;
        let mut buf = Vec::new();
        macro_rules! le {
            ($v:expr) => {{
                for x in $v {
                    buf.extend_from_slice(&x.to_le_bytes());
                }
            }};
        }
        match a {
            MetaArray::U8(v) => buf.extend_from_slice(v),
            MetaArray::I8(v) => le!(v),
            MetaArray::U16(v) => le!(v),
            MetaArray::I16(v) => le!(v),
            MetaArray::U32(v) => le!(v),
            MetaArray::I32(v) => le!(v),
            MetaArray::U64(v) => le!(v),
            MetaArray::I64(v) => le!(v),
            MetaArray::F32(v) => le!(v),
            MetaArray::F64(v) => le!(v),
            MetaArray::Bool(v) => buf.extend(v.iter().map(|&b| b as u8)),
            MetaArray::Str(v) => {
                for s in v {
                    self.string(s)?;
                }
            }
            MetaArray::Array(v) => {
                for inner in v {
                    self.array(inner)?;
                }
            }
        }
        self.put(&buf)
    }
}

/// Write a whole GGUF file to memory: `metadata`, then each tensor with its bytes.
pub fn write_gguf_to_vec(metadata: &Metadata, tensors: &[(TensorSpec, Vec<u8>)]) -> Result<Vec<u8>> {
    let specs: Vec<TensorSpec> = tensors.iter().map(|(s, _)| s.clone()).collect();
    let mut w = GgufWriter::new(Vec::new(), metadata, &specs)?;
    for (spec, bytes) in tensors {
        let want = spec.n_bytes()?;
        if bytes.len() as u64 != want {
            return Err(Error::BadTensor {
                tensor: spec.name.clone(),
                message: format!("{} bytes given, the shape needs {want}", bytes.len()),
            });
        }
        w.write_tensor_data(bytes)?;
    }
    w.finish()
}
