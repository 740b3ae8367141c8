//! GGUF files made in the tests (the `gguf_*` tests): sample files, a raw byte builder for
//! corrupt files, a chunk collector that checks the chunking rules, and an in-memory async stream.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use wick::gguf::{GgufHeader, GgufReader, MetaArray, MetaValue, Metadata, TensorSpec};
use wick::quant::GgmlType;
use wick::source::ByteSource;
use wick::{Error, Result};

use super::{block_on, pattern};

/// Metadata with every value type, arrays of every element type, strings and nested arrays.
pub fn sample_metadata() -> Metadata {
    let mut m = Metadata::new();
    m.insert("general.architecture", MetaValue::Str("llama".into()));
    m.insert("t.u8", MetaValue::U8(200));
    m.insert("t.i8", MetaValue::I8(-100));
    m.insert("t.u16", MetaValue::U16(60000));
    m.insert("t.i16", MetaValue::I16(-30000));
    m.insert("t.u32", MetaValue::U32(4_000_000_000));
    m.insert("t.i32", MetaValue::I32(-2_000_000_000));
    m.insert("t.u64", MetaValue::U64(u64::MAX - 7));
    m.insert("t.i64", MetaValue::I64(i64::MIN + 3));
    m.insert("t.f32", MetaValue::F32(-1.5e-7));
    m.insert("t.f64", MetaValue::F64(std::f64::consts::PI));
    m.insert("t.bool", MetaValue::Bool(true));
    m.insert("t.str", MetaValue::Str("héllo ✓ {{ template }}\n".into()));
    m.insert("t.empty_str", MetaValue::Str(String::new()));
    m.insert("a.u8", MetaValue::Array(MetaArray::U8(vec![0, 1, 255])));
    m.insert("a.i8", MetaValue::Array(MetaArray::I8(vec![-128, 0, 127])));
    m.insert("a.u16", MetaValue::Array(MetaArray::U16(vec![1, 65535])));
    m.insert("a.i16", MetaValue::Array(MetaArray::I16(vec![-32768, 5])));
    m.insert("a.u32", MetaValue::Array(MetaArray::U32(vec![7, u32::MAX])));
    m.insert("a.i32", MetaValue::Array(MetaArray::I32(vec![-1, 2, -3])));
    m.insert("a.u64", MetaValue::Array(MetaArray::U64(vec![u64::MAX])));
    m.insert("a.i64", MetaValue::Array(MetaArray::I64(vec![i64::MIN, 0])));
    m.insert("a.f32", MetaValue::Array(MetaArray::F32(vec![0.5, -0.0, f32::INFINITY])));
    m.insert("a.f64", MetaValue::Array(MetaArray::F64(vec![1e300, -2.5])));
    m.insert("a.bool", MetaValue::Array(MetaArray::Bool(vec![true, false, true])));
    m.insert("a.empty", MetaValue::Array(MetaArray::U32(vec![])));
    m.insert(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::Str(vec!["<s>".into(), "".into(), "Ġthe".into(), "日本".into()])),
    );
    m.insert(
        "a.nested",
        MetaValue::Array(MetaArray::Array(vec![
            MetaArray::I32(vec![1, 2]),
            MetaArray::Str(vec!["x".into()]),
            MetaArray::Array(vec![MetaArray::F32(vec![3.0]), MetaArray::Bool(vec![])]),
        ])),
    );
    m
}

/// Tensors of several types with odd sizes (so padding is exercised), in a non-sorted name order.
pub fn sample_tensors() -> Vec<(TensorSpec, Vec<u8>)> {
    let specs = [
        TensorSpec::new("token_embd.weight", &[64, 3], GgmlType::Q8_0), // 2 blocks × 34 × 3 = 204
        TensorSpec::new("blk.0.attn_norm.weight", &[5], GgmlType::F32), // 20
        TensorSpec::new("blk.0.attn_q.weight", &[256, 2], GgmlType::Q4_K), // 288
        TensorSpec::new("blk.0.ffn_up.weight", &[3, 1, 1, 2], GgmlType::F16), // 12
        TensorSpec::new("output.weight", &[32, 3], GgmlType::Q4_1),     // 60
        TensorSpec::new("x.bf16", &[7], GgmlType::BF16),                // 14
        TensorSpec::new("x.q6k", &[256], GgmlType::Q6_K),               // 210
    ];
    specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let n = s.n_bytes().unwrap() as usize;
            (s, pattern(n, 100 + i as u64))
        })
        .collect()
}

/// A small valid file (a few hundred bytes of header, a few hundred of data).
pub fn sample_file() -> Vec<u8> {
    wick::gguf::write_gguf_to_vec(&sample_metadata(), &sample_tensors()).unwrap()
}

/// Stream every chunk, checking the chunking rules; returns the header and each tensor's bytes.
pub async fn read_all<S: ByteSource>(
    src: S,
    chunk_size: Option<usize>,
) -> Result<(GgufHeader, Vec<Vec<u8>>)> {
    let mut r = GgufReader::open(src).await?;
    if let Some(c) = chunk_size {
        r.set_chunk_size(c);
    }
    let cs = r.chunk_size();
    let header = r.header().clone();
    let n = header.tensors.len();
    let mut data: Vec<Vec<u8>> = vec![Vec::new(); n];
    let mut finished = vec![false; n];
    let mut last_offset: Option<u64> = None;
    while let Some(c) = r.next_chunk().await? {
        let t = &header.tensors[c.tensor];
        assert_eq!(c.info, t);
        assert!(!finished[c.tensor], "chunk for finished tensor {}", t.name);
        assert!(c.data.len() <= cs, "chunk of {} > chunk size {cs}", c.data.len());
        assert!(!c.data.is_empty());
        assert_eq!(c.offset, data[c.tensor].len() as u64, "chunks of {} out of order", t.name);
        if !c.last {
            assert_eq!(c.data.len() % 4, 0, "non-last chunk of {} has length {}", t.name, c.data.len());
        }
        if c.offset == 0 {
            // Tensors come in order of file offset.
            if let Some(prev) = last_offset {
                assert!(t.offset > prev, "tensor {} out of offset order", t.name);
            }
            last_offset = Some(t.offset);
        }
        data[c.tensor].extend_from_slice(c.data);
        assert!(data[c.tensor].len() as u64 <= t.n_bytes());
        if c.last {
            assert_eq!(data[c.tensor].len() as u64, t.n_bytes(), "last chunk early for {}", t.name);
            finished[c.tensor] = true;
        }
    }
    assert!(finished.iter().all(|&f| f), "not every tensor was finished");
    let p = r.progress();
    assert_eq!(p.tensors_done, n);
    assert_eq!(p.tensors_total, n);
    Ok((header, data))
}

/// An in-memory async stream of byte chunks, optionally ending in an error.
pub struct VecStream(pub VecDeque<Result<Vec<u8>>>);

impl VecStream {
    /// `bytes` split into chunks of the given sizes, cycling through them.
    pub fn split(bytes: &[u8], sizes: &[usize]) -> Self {
        let mut q = VecDeque::new();
        let mut i = 0;
        let mut k = 0;
        while i < bytes.len() {
            let n = sizes[k % sizes.len()].min(bytes.len() - i);
            q.push_back(Ok(bytes[i..i + n].to_vec()));
            i += n;
            k += 1;
        }
        VecStream(q)
    }
}

impl futures_core::Stream for VecStream {
    type Item = Result<Vec<u8>>;
    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(self.0.pop_front())
    }
}

/// A raw little-endian byte builder for hand-made (often corrupt) files.
#[derive(Default, Clone)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version and counts.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw::default();
        r.bytes(b"GGUF").u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A u32 metadata entry.
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info.
    pub fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    /// Zero padding to a multiple of 32, then `n` data bytes.
    pub fn data(&mut self, n: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(32) {
            self.0.push(0);
        }
        self.0.extend(std::iter::repeat_n(0xAB, n));
        self
    }
    pub fn build(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// Open `bytes` from memory and stream all of it.
pub fn open_mem(bytes: &[u8]) -> Result<(GgufHeader, Vec<Vec<u8>>)> {
    block_on(read_all(wick::source::MemorySource::new(bytes), None))
}

/// The error, or a panic naming what was expected.
pub fn expect_err(bytes: &[u8], what: &str) -> Error {
    match open_mem(bytes) {
        Ok(_) => panic!("expected an error ({what}), got Ok"),
        Err(e) => e,
    }
}
