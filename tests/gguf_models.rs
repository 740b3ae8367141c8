//! Real files: the two small models the download script fetches. Expected values were read off
//! the files with the `gguf` Python package (0.17+, `GGUFReader`).
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use support::block_on;
use support::models::model_path;
use wick::gguf::GgufReader;
use wick::quant::GgmlType;
use wick::source::FileSource;

fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x100000001b3);
    }
}

struct Expect {
    file: &'static str,
    arch: &'static str,
    n_tensors: usize,
    n_kv: usize,
    n_vocab: usize,
    data_offset: u64,
    total_bytes: u64,
    /// (name, dims, type, offset, n_bytes)
    shapes: &'static [(&'static str, &'static [u64], GgmlType, u64, u64)],
    /// (name, FNV-1a 64 of the tensor's bytes)
    hashes: &'static [(&'static str, u64)],
}

fn check_model(x: &Expect) {
    let path = model_path(x.file);
    let file_len = std::fs::metadata(&path).unwrap().len();
    let mut r = block_on(async { GgufReader::open(FileSource::open(&path).await?).await }).unwrap();
    let h = r.header().clone();
    assert_eq!(h.version, 3);
    assert_eq!(h.metadata.str("general.architecture").unwrap(), x.arch);
    assert_eq!(h.tensors.len(), x.n_tensors);
    assert_eq!(h.metadata.len(), x.n_kv);
    assert_eq!(h.metadata.str_array("tokenizer.ggml.tokens").unwrap().len(), x.n_vocab);
    assert_eq!(h.alignment, 32);
    assert_eq!(h.data_offset, x.data_offset);
    assert_eq!(h.total_tensor_bytes(), x.total_bytes);
    for &(name, dims, dtype, offset, n_bytes) in x.shapes {
        let t = h.tensor(name).unwrap_or_else(|| panic!("no tensor {name}"));
        assert_eq!(
            (t.dims.as_slice(), t.dtype, t.offset, t.n_bytes()),
            (dims, dtype, offset, n_bytes),
            "{name}"
        );
    }

    // Stream everything with the default chunk size, checking the chunk rules and hashes.
    let mut total = 0u64;
    let mut hashes = vec![0xcbf29ce484222325u64; h.tensors.len()];
    let mut seen = vec![0u64; h.tensors.len()];
    let mut chunks = 0;
    while let Some(c) = block_on(r.next_chunk()).unwrap() {
        assert!(c.data.len() <= wick::gguf::DEFAULT_CHUNK_SIZE);
        assert!(c.last || c.data.len() % 4 == 0);
        assert_eq!(c.offset, seen[c.tensor]);
        seen[c.tensor] += c.data.len() as u64;
        assert_eq!(c.last, seen[c.tensor] == h.tensors[c.tensor].n_bytes());
        fnv1a(&mut hashes[c.tensor], c.data);
        total += c.data.len() as u64;
        chunks += 1;
    }
    assert_eq!(total, x.total_bytes);
    assert!(chunks >= x.n_tensors);
    let p = r.progress();
    assert_eq!((p.tensors_done, p.tensors_total), (x.n_tensors, x.n_tensors));
    assert_eq!(p.bytes_total, Some(file_len));
    assert_eq!(p.bytes_done, file_len);
    for &(name, want) in x.hashes {
        let i = h.tensor_index(name).unwrap();
        assert_eq!(hashes[i], want, "hash of {name}");
    }
}

#[test]
fn smollm2_135m_q4_1() {
    check_model(&Expect {
        file: "SmolLM2-135M-Instruct.Q4_1.gguf",
        arch: "llama",
        n_tensors: 272,
        n_kv: 33,
        n_vocab: 49152,
        data_offset: 1785664,
        total_bytes: 96576768,
        shapes: &[
            ("token_embd.weight", &[576, 49152], GgmlType::Q8_0, 0, 30081024),
            ("blk.0.attn_norm.weight", &[576], GgmlType::F32, 30081024, 2304),
            ("blk.0.ffn_down.weight", &[1536, 576], GgmlType::Q4_1, 30083328, 552960),
            ("blk.9.attn_v.weight", &[576, 192], GgmlType::Q4_1, 96505344, 69120),
            ("output_norm.weight", &[576], GgmlType::F32, 96574464, 2304),
        ],
        hashes: &[("output_norm.weight", 0xea814bed6299e304), ("blk.0.ffn_down.weight", 0x19d538498bf845a4)],
    });
}

#[test]
fn gemma3_270m_q4_k_m() {
    check_model(&Expect {
        file: "gemma-3-270m-q4_k_m.gguf",
        arch: "gemma3",
        n_tensors: 236,
        n_kv: 33,
        n_vocab: 262144,
        data_offset: 6525120,
        total_bytes: 246587904,
        shapes: &[
            ("output_norm.weight", &[640], GgmlType::F32, 0, 2560),
            ("token_embd.weight", &[640, 262144], GgmlType::Q8_0, 2560, 178257920),
            ("blk.0.attn_k.weight", &[640, 256], GgmlType::Q5_0, 178260480, 112640),
            ("blk.0.attn_output.weight", &[1024, 640], GgmlType::Q4_K, 178376704, 368640),
            ("blk.17.ffn_up.weight", &[640, 2048], GgmlType::Q5_0, 245681664, 901120),
        ],
        hashes: &[
            ("output_norm.weight", 0x11c22e7acf60d9d7),
            ("blk.0.attn_output.weight", 0xdbb9a77f9882e6b9),
        ],
    });
}
