//! Test-only: read just the metadata of a GGUF file (header and key/value pairs, stopping
//! before the tensor infos) into a `wick::gguf::Metadata`. The real reader lives in src/gguf.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use wick::gguf::{MetaArray, MetaValue, Metadata};

struct R<T: Read>(T);

impl<T: Read> R<T> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        self.0.read_exact(&mut b).expect("truncated GGUF header");
        b
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }
    fn string(&mut self) -> String {
        let n = self.u64();
        assert!(n < 1 << 30, "absurd string length {n}");
        let mut b = vec![0u8; n as usize];
        self.0.read_exact(&mut b).expect("truncated GGUF string");
        String::from_utf8(b).expect("GGUF string is not UTF-8")
    }
    fn array(&mut self) -> MetaArray {
        let t = self.u32();
        let n = self.u64() as usize;
        assert!(n < 1 << 28, "absurd array length {n}");
        macro_rules! arr {
            ($v:ident, $ty:ty) => {
                MetaArray::$v((0..n).map(|_| <$ty>::from_le_bytes(self.bytes())).collect())
            };
        }
        match t {
            0 => arr!(U8, u8),
            1 => arr!(I8, i8),
            2 => arr!(U16, u16),
            3 => arr!(I16, i16),
            4 => arr!(U32, u32),
            5 => arr!(I32, i32),
            6 => arr!(F32, f32),
            7 => MetaArray::Bool((0..n).map(|_| self.bytes::<1>()[0] != 0).collect()),
            8 => MetaArray::Str((0..n).map(|_| self.string()).collect()),
            9 => MetaArray::Array((0..n).map(|_| self.array()).collect()),
            10 => arr!(U64, u64),
            11 => arr!(I64, i64),
            12 => arr!(F64, f64),
            _ => panic!("bad GGUF array element type {t}"),
        }
    }
    fn value(&mut self, t: u32) -> MetaValue {
        match t {
            0 => MetaValue::U8(self.bytes::<1>()[0]),
            1 => MetaValue::I8(i8::from_le_bytes(self.bytes())),
            2 => MetaValue::U16(u16::from_le_bytes(self.bytes())),
            3 => MetaValue::I16(i16::from_le_bytes(self.bytes())),
            4 => MetaValue::U32(self.u32()),
            5 => MetaValue::I32(i32::from_le_bytes(self.bytes())),
            6 => MetaValue::F32(f32::from_le_bytes(self.bytes())),
            7 => MetaValue::Bool(self.bytes::<1>()[0] != 0),
            8 => MetaValue::Str(self.string()),
            9 => MetaValue::Array(self.array()),
            10 => MetaValue::U64(self.u64()),
            11 => MetaValue::I64(i64::from_le_bytes(self.bytes())),
            12 => MetaValue::F64(f64::from_le_bytes(self.bytes())),
            _ => panic!("bad GGUF value type {t}"),
        }
    }
}

/// The models directory: `$WICK_MODELS`, else `<crate>/models`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("WICK_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

/// The path of a model file; panics (fails the test) with instructions when it is missing.
pub fn model_path(file: &str) -> PathBuf {
    let p = models_dir().join(file);
    assert!(
        p.is_file(),
        "model file {} is missing: run the model download script first (or set WICK_MODELS to the directory holding it)",
        p.display()
    );
    p
}

/// Read the metadata of a GGUF v3 file.
pub fn read_metadata(path: &Path) -> Metadata {
    let f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut r = R(BufReader::with_capacity(1 << 20, f));
    assert_eq!(&r.bytes::<4>(), b"GGUF", "{} is not a GGUF file", path.display());
    let version = r.u32();
    assert_eq!(version, 3, "only GGUF version 3 is supported here");
    let _n_tensors = r.u64();
    let n_kv = r.u64();
    let mut md = Metadata::new();
    for _ in 0..n_kv {
        let key = r.string();
        let t = r.u32();
        let v = r.value(t);
        md.insert(key, v);
    }
    md
}
