//! Writer → reader round trips: every metadata type, several tensor types, chunk reassembly
//! at several chunk sizes and through every source kind.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::gguf::*;
use support::{block_on, pattern};
use wick::gguf::{
    write_gguf_to_vec, GgufReader, GgufWriter, MetaValue, Metadata, TensorSpec, DEFAULT_CHUNK_SIZE,
};
use wick::quant::GgmlType;
use wick::source::{ByteSource, MemorySource, StreamSource};
use wick::Error;

fn check_roundtrip(header: &wick::gguf::GgufHeader, data: &[Vec<u8>]) {
    let meta = sample_metadata();
    assert_eq!(header.alignment, 32);
    assert_eq!(header.data_offset % 32, 0);
    assert_eq!(header.metadata.len(), meta.len());
    for (k, v) in meta.iter() {
        let got = header.metadata.get(k).unwrap_or_else(|| panic!("key {k} lost"));
        // Compare bit patterns so NaN/-0.0 would be caught too.
        assert_eq!(format!("{got:?}"), format!("{v:?}"), "value of {k}");
        assert_eq!(got, v, "value of {k}");
    }
    let tensors = sample_tensors();
    assert_eq!(header.tensors.len(), tensors.len());
    for (i, (spec, bytes)) in tensors.iter().enumerate() {
        let t = &header.tensors[i];
        assert_eq!(t.name, spec.name);
        assert_eq!(t.dims, spec.dims);
        assert_eq!(t.dtype, spec.dtype);
        assert_eq!(t.offset % 32, 0);
        assert_eq!(t.n_bytes(), bytes.len() as u64);
        assert_eq!(t.n_elements(), spec.dims.iter().product::<u64>());
        assert_eq!(&data[i], bytes, "data of {}", t.name);
    }
}

#[test]
fn roundtrip_every_type_default_chunks() {
    let file = sample_file();
    let (header, data) = block_on(read_all(MemorySource::new(file.clone()), None)).unwrap();
    check_roundtrip(&header, &data);
    assert_eq!(header.version, 3);
    assert_eq!(header.metadata.str("general.architecture").unwrap(), "llama");
    assert_eq!(header.metadata.str_array("tokenizer.ggml.tokens").unwrap()[3], "日本");
}

#[test]
fn roundtrip_small_chunks() {
    let file = sample_file();
    for chunk in [1 << 10, 64, 13, 4, 1] {
        let (header, data) = block_on(read_all(MemorySource::new(&file[..]), Some(chunk))).unwrap();
        check_roundtrip(&header, &data);
    }
}

#[test]
fn roundtrip_through_stream_source() {
    let file = sample_file();
    for sizes in [&[1usize][..], &[7, 0, 3], &[4096], &[33, 1, 250]] {
        let src = StreamSource::new(VecStream::split(&file, sizes));
        assert_eq!(src.len_hint(), None);
        let (header, data) = block_on(read_all(src, Some(1 << 10))).unwrap();
        check_roundtrip(&header, &data);
    }
}

#[test]
fn roundtrip_through_file_source() {
    let dir = std::env::temp_dir().join(format!("wick-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.gguf");
    let file = sample_file();
    std::fs::write(&path, &file).unwrap();
    let src = block_on(wick::source::FileSource::open(&path)).unwrap();
    assert_eq!(src.len_hint(), Some(file.len() as u64));
    let (header, data) = block_on(read_all(src, Some(1 << 10))).unwrap();
    check_roundtrip(&header, &data);
    std::fs::remove_dir_all(&dir).ok();
    let missing = block_on(wick::source::FileSource::open(dir.join("nope.gguf")));
    assert!(matches!(missing, Err(Error::Io { .. })), "{missing:?}");
}

/// Chunk boundaries: with a 1 KiB chunk, a 5000-byte tensor comes as 1024 × 4 + 904, and an
/// odd-sized tensor's only short chunk is its last one.
#[test]
fn chunk_lengths_follow_the_rules() {
    let tensors = vec![
        (TensorSpec::new("a", &[1250], GgmlType::F32), pattern(5000, 1)),
        (TensorSpec::new("b", &[4097], GgmlType::F16), pattern(8194, 2)),
        (TensorSpec::new("c", &[1], GgmlType::BF16), pattern(2, 3)),
    ];
    let file = write_gguf_to_vec(&Metadata::new(), &tensors).unwrap();
    let mut r = block_on(GgufReader::open(MemorySource::new(&file[..]))).unwrap();
    assert_eq!(r.chunk_size(), DEFAULT_CHUNK_SIZE);
    r.set_chunk_size(1 << 10);
    let mut lens = Vec::new();
    let mut progress = Vec::new();
    while let Some(c) = block_on(r.next_chunk()).unwrap() {
        lens.push((c.tensor, c.data.len(), c.last));
        progress.push(r.progress());
    }
    let expect: Vec<(usize, usize, bool)> = [(0, 5000), (1, 8194), (2, 2)]
        .iter()
        .flat_map(|&(t, n)| {
            let k = n / 1024;
            let rest = n % 1024;
            let mut v: Vec<_> = (0..k).map(|i| (t, 1024, rest == 0 && i == k - 1)).collect();
            if rest > 0 {
                v.push((t, rest, true));
            }
            v
        })
        .collect();
    assert_eq!(lens, expect);
    // Progress: bytes grow, tensors finish one by one, the total is the file length.
    assert!(progress.windows(2).all(|w| w[0].bytes_done < w[1].bytes_done));
    let last = progress.last().unwrap();
    assert_eq!(last.tensors_done, 3);
    assert_eq!(last.bytes_total, Some(file.len() as u64));
    assert!(last.bytes_done <= file.len() as u64);
    assert!(block_on(r.next_chunk()).unwrap().is_none());
    // Odd chunk sizes are rounded down to a multiple of 4.
    r.set_chunk_size(1023);
    assert_eq!(r.chunk_size(), 1020);
    r.set_chunk_size(0);
    assert_eq!(r.chunk_size(), 4);
}

/// Tensor infos listed out of offset order are still streamed in offset order.
#[test]
fn tensors_stream_in_offset_order() {
    let mut raw = Raw::header(3, 2, 0);
    raw.tensor("second", &[8], 0, 32).tensor("first", &[8], 0, 0);
    raw.data(0);
    let base = raw.0.len();
    raw.0.extend((0..64u8).collect::<Vec<_>>());
    let file = raw.build();
    let (header, data) = open_mem(&file).unwrap();
    assert_eq!(header.data_offset as usize, base);
    assert_eq!(data[1], (0..32u8).collect::<Vec<_>>());
    assert_eq!(data[0], (32..64u8).collect::<Vec<_>>());
}

#[test]
fn writer_alignment_and_errors() {
    let mut meta = Metadata::new();
    meta.insert("general.alignment", MetaValue::U32(64));
    let tensors = vec![
        (TensorSpec::new("a", &[3], GgmlType::F32), pattern(12, 1)),
        (TensorSpec::new("b", &[5], GgmlType::F32), pattern(20, 2)),
    ];
    let file = write_gguf_to_vec(&meta, &tensors).unwrap();
    let (header, data) = open_mem(&file).unwrap();
    assert_eq!(header.alignment, 64);
    assert_eq!(header.data_offset % 64, 0);
    assert_eq!(header.tensors[1].offset, 64);
    assert_eq!(data[1], tensors[1].1);
    assert_eq!(file.len() % 64, 0, "the last tensor is padded too, like llama.cpp");

    // Any chunking of the data is accepted; too many bytes and too few are errors.
    let specs: Vec<_> = tensors.iter().map(|(s, _)| s.clone()).collect();
    let all: Vec<u8> = tensors.iter().flat_map(|(_, b)| b.clone()).collect();
    let mut w = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
    for piece in all.chunks(5) {
        w.write_tensor_data(piece).unwrap();
    }
    assert_eq!(w.finish().unwrap(), file);
    let mut w = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
    w.write_tensor_data(&all).unwrap();
    assert!(matches!(w.write_tensor_data(&[0]), Err(Error::InvalidArgument(_))));
    let mut w = GgufWriter::new(Vec::new(), &meta, &specs).unwrap();
    w.write_tensor_data(&all[..20]).unwrap();
    assert!(matches!(w.finish(), Err(Error::InvalidArgument(_))));

    // Bad specs.
    let bad = |spec: TensorSpec| GgufWriter::new(Vec::new(), &Metadata::new(), &[spec]).is_err();
    assert!(bad(TensorSpec::new("q", &[16], GgmlType::Q4_0)));
    assert!(bad(TensorSpec::new("q", &[], GgmlType::F32)));
    assert!(bad(TensorSpec::new("q", &[1, 1, 1, 1, 1], GgmlType::F32)));
    assert!(bad(TensorSpec::new("q", &[0], GgmlType::F32)));
    let dup = [TensorSpec::new("d", &[1], GgmlType::F32), TensorSpec::new("d", &[1], GgmlType::F32)];
    assert!(GgufWriter::new(Vec::new(), &Metadata::new(), &dup).is_err());
    let mut meta = Metadata::new();
    meta.insert("general.alignment", MetaValue::U32(48));
    assert!(matches!(GgufWriter::new(Vec::new(), &meta, &[]), Err(Error::BadMetadata { .. })));
}

#[test]
fn empty_file_no_tensors() {
    let file = write_gguf_to_vec(&Metadata::new(), &[]).unwrap();
    let (header, data) = open_mem(&file).unwrap();
    assert!(header.tensors.is_empty() && header.metadata.is_empty() && data.is_empty());
}

/// Version 2 files have the same layout as version 3 (v3 only added big-endian files).
#[test]
fn version_2_is_read() {
    let mut file = sample_file();
    file[4..8].copy_from_slice(&2u32.to_le_bytes());
    let (header, data) = open_mem(&file).unwrap();
    assert_eq!(header.version, 2);
    check_roundtrip(&header, &data);
}

/// The sources themselves: leftovers of a stream chunk are kept, empty chunks skipped, the end
/// is `Ok(0)`, and memory sources own or borrow.
#[test]
fn sources_read_in_order() {
    async fn drain<S: ByteSource>(mut s: S, step: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let mut buf = vec![0; step];
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            out.push(buf[..n].to_vec());
        }
        out
    }
    let chunks = vec![Ok(b"hello".to_vec()), Ok(Vec::new()), Ok(b"world!".to_vec())];
    let s = StreamSource::with_len(VecStream(chunks.into()), 11);
    assert_eq!(s.len_hint(), Some(11));
    let got = block_on(drain(s, 3));
    assert_eq!(got, [&b"hel"[..], b"lo", b"wor", b"ld!"]);

    let owned = MemorySource::new(b"abcdefg".to_vec());
    assert_eq!(owned.len_hint(), Some(7));
    assert_eq!(block_on(drain(owned, 4)), [&b"abcd"[..], b"efg"]);
    let data = [1u8, 2, 3];
    let mut borrowed = MemorySource::new(&data[..]);
    assert_eq!(block_on(drain(&mut borrowed, 8)), [vec![1u8, 2, 3]]);
    assert_eq!(borrowed.remaining(), 0);
    // An empty buffer reads nothing and does not end the stream.
    let mut s = StreamSource::new(VecStream::split(b"xy", &[1]));
    assert_eq!(block_on(s.read(&mut [])).unwrap(), 0);
    assert_eq!(block_on(drain(s, 8)), [b"x".to_vec(), b"y".to_vec()]);
}

/// A stream that announces its length gets the early truncation check too.
#[test]
fn stream_with_len_checks_early() {
    let file = sample_file();
    let cut = &file[..file.len() - 300];
    let src = StreamSource::with_len(VecStream::split(cut, &[100]), cut.len() as u64);
    let e = block_on(GgufReader::open(src)).unwrap_err();
    assert!(matches!(e, Error::Truncated { .. }), "{e:?}");
}

/// Memory stays bounded by the chunk size: the reader never asks its source for more than one
/// chunk (or its 64 KiB read-ahead) at a time, however large the tensor.
#[test]
fn reads_are_bounded_by_the_chunk_size() {
    struct Counting<'a> {
        inner: MemorySource<&'a [u8]>,
        max_request: usize,
    }
    impl ByteSource for Counting<'_> {
        async fn read(&mut self, buf: &mut [u8]) -> wick::Result<usize> {
            self.max_request = self.max_request.max(buf.len());
            self.inner.read(buf).await
        }
        fn len_hint(&self) -> Option<u64> {
            self.inner.len_hint()
        }
    }
    let tensors = vec![(TensorSpec::new("big", &[3 << 20], GgmlType::F32), pattern(12 << 20, 9))];
    let file = write_gguf_to_vec(&Metadata::new(), &tensors).unwrap();
    for (chunk, bound) in [(1 << 10, 64 << 10), (DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_SIZE)] {
        let mut src = Counting { inner: MemorySource::new(&file[..]), max_request: 0 };
        let mut r = block_on(GgufReader::open(&mut src)).unwrap();
        r.set_chunk_size(chunk);
        let mut total = 0;
        while let Some(c) = block_on(r.next_chunk()).unwrap() {
            total += c.data.len();
        }
        drop(r);
        assert_eq!(total, 12 << 20);
        assert!(src.max_request <= bound, "asked for {} bytes at once", src.max_request);
    }
}
