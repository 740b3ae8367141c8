//! Bad input: each kind of corruption gets its own clear error, and no input panics.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::gguf::*;
use support::{block_on, Rng};
use wick::gguf::GgufReader;
use wick::source::{MemorySource, StreamSource};
use wick::Error;

fn is_truncated(e: &Error) -> bool {
    matches!(e, Error::Truncated { .. })
}

fn corrupt_msg(e: Error) -> String {
    match e {
        Error::Corrupt { message, .. } => message,
        e => panic!("expected Corrupt, got {e:?}"),
    }
}

/// Every strict prefix of a valid file that cuts into header or tensor data is `Truncated`, both
/// when the length is known up front (memory) and when it is not (a stream); a prefix that only
/// drops trailing padding reads fine.
#[test]
fn every_prefix_is_truncated() {
    let file = sample_file();
    let (header, _) = open_mem(&file).unwrap();
    let data_end = header.tensors.iter().map(|t| header.data_offset + t.offset + t.n_bytes()).max().unwrap();
    assert!(data_end < file.len() as u64, "the sample should end with padding");
    for len in 0..file.len() {
        let prefix = &file[..len];
        let mem = block_on(read_all(MemorySource::new(prefix), Some(64)));
        let stream = block_on(read_all(StreamSource::new(VecStream::split(prefix, &[5, 64])), Some(64)));
        for (kind, r) in [("memory", mem), ("stream", stream)] {
            if (len as u64) < data_end {
                match r {
                    Err(e) => assert!(is_truncated(&e), "prefix {len} ({kind}): {e:?}"),
                    Ok(_) => panic!("prefix {len} ({kind}) read fine"),
                }
            } else {
                assert!(r.is_ok(), "prefix {len} ({kind}) keeps all data: {r:?}");
            }
        }
    }
    // With the length known, truncation inside the data is caught before any data is read.
    let e = block_on(GgufReader::open(MemorySource::new(&file[..data_end as usize - 1]))).unwrap_err();
    assert!(is_truncated(&e), "{e:?}");
}

#[test]
fn wrong_magic() {
    let mut file = sample_file();
    file[0] = b'X';
    let e = expect_err(&file, "bad magic");
    assert!(corrupt_msg(e).contains("magic"));
}

#[test]
fn version_1_and_99() {
    let mut file = sample_file();
    file[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(corrupt_msg(expect_err(&file, "v1")).contains("version 1"));
    file[4..8].copy_from_slice(&99u32.to_le_bytes());
    assert!(corrupt_msg(expect_err(&file, "v99")).contains("version 99"));
}

#[test]
fn absurd_tensor_count() {
    let e = expect_err(&Raw::header(3, 1 << 40, 0).build(), "tensor count");
    assert!(corrupt_msg(e).contains("tensor count"));
    // Under the cap but more than the file can hold.
    let e = expect_err(&Raw::header(3, 1000, 0).data(64).build(), "tensor count vs length");
    assert!(is_truncated(&e), "{e:?}");
}

#[test]
fn absurd_kv_count() {
    let e = expect_err(&Raw::header(3, 0, u64::MAX).build(), "kv count");
    assert!(corrupt_msg(e).contains("metadata count"));
    let e = expect_err(&Raw::header(3, 0, 100_000).build(), "kv count vs length");
    assert!(is_truncated(&e), "{e:?}");
}

#[test]
fn absurd_string_length() {
    // Key length.
    let mut raw = Raw::header(3, 0, 1);
    raw.u64(1 << 40).bytes(b"key").u32(4).u32(0);
    assert!(corrupt_msg(expect_err(&raw.build(), "key length")).contains("length"));
    // Value length above the cap.
    let mut raw = Raw::header(3, 0, 1);
    raw.str("k").u32(8).u64(u64::MAX - 1).bytes(b"abc");
    assert!(corrupt_msg(expect_err(&raw.build(), "string length")).contains("length"));
    // Under the cap but past the end.
    let mut raw = Raw::header(3, 0, 1);
    raw.str("k").u32(8).u64(1 << 20).bytes(b"abc");
    assert!(is_truncated(&expect_err(&raw.build(), "string vs length")));
    // Invalid UTF-8.
    let mut raw = Raw::header(3, 0, 1);
    raw.str("k").u32(8).u64(2).bytes(&[0xff, 0xfe]);
    assert!(corrupt_msg(expect_err(&raw.build(), "utf-8")).contains("UTF-8"));
}

#[test]
fn absurd_arrays() {
    let mut raw = Raw::header(3, 0, 1);
    raw.str("a").u32(9).u32(4).u64(1 << 60);
    assert!(corrupt_msg(expect_err(&raw.build(), "array length")).contains("array length"));
    let mut raw = Raw::header(3, 0, 1);
    raw.str("a").u32(9).u32(8).u64(1 << 20).str("x");
    assert!(is_truncated(&expect_err(&raw.build(), "array vs length")));
    let mut raw = Raw::header(3, 0, 1);
    raw.str("a").u32(9).u32(77).u64(1);
    assert!(corrupt_msg(expect_err(&raw.build(), "element type")).contains("element type"));
    // Nesting deeper than the cap.
    let mut raw = Raw::header(3, 0, 1);
    raw.str("a").u32(9);
    for _ in 0..10 {
        raw.u32(9).u64(1);
    }
    raw.u32(4).u64(0);
    assert!(corrupt_msg(expect_err(&raw.build(), "nesting")).contains("nested"));
}

#[test]
fn bad_metadata_values() {
    let mut raw = Raw::header(3, 0, 1);
    raw.str("k").u32(13).u32(0);
    assert!(corrupt_msg(expect_err(&raw.build(), "value type")).contains("value type 13"));
    let mut raw = Raw::header(3, 0, 1);
    raw.str("b").u32(7).bytes(&[2]);
    assert!(corrupt_msg(expect_err(&raw.build(), "bool")).contains("bool"));
    let mut raw = Raw::header(3, 0, 2);
    raw.kv_u32("k", 1).kv_u32("k", 2);
    assert!(corrupt_msg(expect_err(&raw.build(), "duplicate key")).contains("duplicate"));
    for a in [0u32, 3, 48] {
        let mut raw = Raw::header(3, 0, 1);
        raw.kv_u32("general.alignment", a);
        let e = expect_err(&raw.build(), "alignment");
        assert!(matches!(e, Error::BadMetadata { ref key, .. } if key == "general.alignment"), "{e:?}");
    }
}

fn one_tensor(dims: &[u64], type_id: u32, offset: u64) -> Vec<u8> {
    let mut raw = Raw::header(3, 1, 0);
    raw.tensor("w", dims, type_id, offset).data(4096);
    raw.build()
}

#[test]
fn absurd_dims_and_overflow() {
    assert!(corrupt_msg(expect_err(&one_tensor(&[0], 0, 0), "dim 0")).contains("dimension 0"));
    assert!(corrupt_msg(expect_err(&one_tensor(&[u64::MAX], 0, 0), "dim max")).contains("out of range"));
    let e = expect_err(&one_tensor(&[1 << 32, 1 << 32], 0, 0), "overflow");
    assert!(corrupt_msg(e).contains("overflow"));
    let e = expect_err(&one_tensor(&[1 << 20, 1 << 20, 1 << 20, 1 << 20], 0, 0), "overflow 4d");
    assert!(corrupt_msg(e).contains("overflow"));
    // Huge but representable: more data than the file holds.
    assert!(is_truncated(&expect_err(&one_tensor(&[1 << 30, 1 << 20], 0, 0), "huge")));
    // Row not a whole number of blocks: Q4_0 has 32-element blocks.
    assert!(corrupt_msg(expect_err(&one_tensor(&[16], 2, 0), "block")).contains("block size"));
}

#[test]
fn n_dims_5_and_0() {
    assert!(corrupt_msg(expect_err(&one_tensor(&[1, 1, 1, 1, 1], 0, 0), "5 dims")).contains("5 dimensions"));
    assert!(corrupt_msg(expect_err(&one_tensor(&[], 0, 0), "0 dims")).contains("0 dimensions"));
}

#[test]
fn unknown_tensor_type() {
    match expect_err(&one_tensor(&[32], 99, 0), "type 99") {
        Error::UnsupportedType { tensor, type_id, .. } => assert_eq!((tensor.as_str(), type_id), ("w", 99)),
        e => panic!("{e:?}"),
    }
    match expect_err(&one_tensor(&[256], 16, 0), "IQ2_XXS") {
        Error::UnsupportedType { tensor, type_name, .. } => {
            assert_eq!((&*tensor, &*type_name), ("w", "IQ2_XXS"))
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn overlapping_tensors() {
    let mut raw = Raw::header(3, 2, 0);
    raw.tensor("a", &[16], 0, 0).tensor("b", &[16], 0, 32).data(128);
    assert!(corrupt_msg(expect_err(&raw.build(), "overlap")).contains("overlaps"));
    // Same offset.
    let mut raw = Raw::header(3, 2, 0);
    raw.tensor("a", &[1], 0, 64).tensor("b", &[1], 0, 64).data(128);
    assert!(corrupt_msg(expect_err(&raw.build(), "same offset")).contains("overlaps"));
}

#[test]
fn misaligned_offset() {
    assert!(corrupt_msg(expect_err(&one_tensor(&[4], 0, 4), "misaligned")).contains("alignment"));
    // A custom alignment applies to offsets too.
    let mut raw = Raw::header(3, 1, 1);
    raw.kv_u32("general.alignment", 64).tensor("w", &[4], 0, 32).data(4096);
    assert!(corrupt_msg(expect_err(&raw.build(), "misaligned 64")).contains("alignment 64"));
}

#[test]
fn duplicate_tensor_names() {
    let mut raw = Raw::header(3, 2, 0);
    raw.tensor("w", &[8], 0, 0).tensor("w", &[8], 0, 32).data(128);
    assert!(corrupt_msg(expect_err(&raw.build(), "duplicate")).contains("duplicate tensor name 'w'"));
}

#[test]
fn stream_errors_propagate() {
    let file = sample_file();
    let mut stream = VecStream::split(&file[..file.len() - 100], &[64]);
    stream.0.push_back(Err(Error::io("fetching", "connection reset")));
    let r = block_on(read_all(StreamSource::new(stream), None));
    assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");

    // After a failed chunk the reader says so instead of yielding misplaced bytes.
    let mut r = block_on(GgufReader::open(MemorySource::new(&file[..]))).unwrap();
    let cut = r.header().data_offset as usize + 10;
    let mut r2 =
        block_on(GgufReader::open(StreamSource::new(VecStream::split(&file[..cut], &[64])))).unwrap();
    assert!(block_on(r.next_chunk()).unwrap().is_some());
    assert!(is_truncated(&block_on(r2.next_chunk()).unwrap_err()));
    assert!(matches!(block_on(r2.next_chunk()), Err(Error::InvalidArgument(_))));
}

/// Thousands of seeded random corruptions of a small valid file: every one reads to `Ok` or
/// `Err`, none panics or runs away. Reproduce a failure from the printed seed.
#[test]
fn seeded_mutations_never_panic() {
    let file = sample_file();
    let (header, _) = open_mem(&file).unwrap();
    let header_len = header.data_offset as usize;
    let interesting: [u64; 10] = [0, 1, 2, 4, 5, 32, 0xff, 1 << 31, 1 << 63, u64::MAX];
    let (mut ok, mut err) = (0, 0);
    for seed in 0..6000u64 {
        let mut rng = Rng(seed);
        let mut f = file.clone();
        for _ in 0..1 + rng.below(4) {
            // Mostly the header, where the structure is.
            let limit = if rng.below(10) < 8 { header_len.min(f.len()) } else { f.len() };
            if limit == 0 {
                break;
            }
            let at = rng.below(limit as u64) as usize;
            match rng.below(5) {
                0 => f[at] ^= 1 << rng.below(8),
                1 => f[at] = rng.next() as u8,
                2 => {
                    let v = interesting[rng.below(interesting.len() as u64) as usize];
                    let w = [1usize, 4, 8][rng.below(3) as usize];
                    let bytes = v.to_le_bytes();
                    let end = (at + w).min(f.len());
                    f[at..end].copy_from_slice(&bytes[..end - at]);
                }
                3 => f.truncate(at),
                _ => {
                    let n = rng.below(16) as usize;
                    let end = (at + n).min(f.len());
                    f.drain(at..end);
                }
            }
        }
        let r = std::panic::catch_unwind(|| {
            if seed % 2 == 0 {
                block_on(read_all(MemorySource::new(&f[..]), Some(4 + 4 * (seed as usize % 64))))
            } else {
                block_on(read_all(StreamSource::new(VecStream::split(&f, &[1 + seed as usize % 97])), None))
            }
        });
        match r {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(_)) => err += 1,
            Err(_) => panic!("seed {seed} panicked"),
        }
    }
    eprintln!("mutations: {ok} ok, {err} errors");
    // The test must exercise both outcomes to mean anything.
    assert!(ok > 100 && err > 1000, "ok {ok}, err {err}");
}
