//! Loading from an async byte stream in uneven chunks gives the same model as loading from a
//! file, with progress events that only move forward and end at the file's size.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

mod support;

use std::cell::RefCell;

use support::block_on;
use support::models::*;
use wick::exec::Readback;
use wick::gguf::Progress;
use wick::source::StreamSource;
use wick::{Engine, Error, ExecutorKind, LoadOptions, SessionOptions};

/// A stream yielding `data` in chunks of pseudo-random sizes between 1 byte and 3 MB.
fn chunks(data: Vec<u8>) -> impl futures_core::Stream<Item = wick::Result<Vec<u8>>> + Unpin {
    let mut pos = 0usize;
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut pieces = Vec::new();
    while pos < data.len() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let n = if state.is_multiple_of(5) {
            1 + (state % 97) as usize
        } else {
            1 + (state % 3_000_000) as usize
        };
        let end = (pos + n).min(data.len());
        pieces.push(Ok(data[pos..end].to_vec()));
        pos = end;
    }
    Iter(pieces.into_iter())
}

struct Iter<I>(I);
impl<I: Iterator<Item = wick::Result<Vec<u8>>> + Unpin> futures_core::Stream for Iter<I> {
    type Item = wick::Result<Vec<u8>>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(self.0.next())
    }
}

#[test]
fn stream_load_equals_file_load_with_progress() {
    let bytes = std::fs::read(model_path(SMOLLM2)).unwrap();
    let total = bytes.len() as u64;
    let events: RefCell<Vec<Progress>> = RefCell::new(Vec::new());
    let engine = block_on(Engine::new(ExecutorKind::Cpu)).unwrap();
    let opts = LoadOptions {
        on_progress: Some(Box::new(|p: &Progress| events.borrow_mut().push(*p))),
        chunk_size: 1 << 20,
        ..Default::default()
    };
    let streamed = block_on(engine.load(StreamSource::with_len(chunks(bytes), total), opts)).unwrap();
    let events = events.into_inner();
    assert!(events.len() > 50, "only {} progress events", events.len());
    for w in events.windows(2) {
        assert!(w[1].bytes_done >= w[0].bytes_done && w[1].tensors_done >= w[0].tensors_done);
    }
    let last = events.last().unwrap();
    assert_eq!(last.bytes_done, total);
    assert_eq!(last.tensors_done, last.tensors_total);
    assert_eq!(last.tensors_total, 272);

    let from_file = load_cpu(SMOLLM2);
    let prompt = from_file.tokenizer().encode("The capital of France is", true, true).unwrap();
    let logits = |m: &wick::Model| {
        let mut s = m.session(SessionOptions { n_ctx: 64, ..Default::default() }).unwrap();
        block_on(s.eval(&prompt, Readback::LastLogits)).unwrap().logits
    };
    assert_eq!(logits(&streamed), logits(&from_file));
}

/// Without the feature, or (with it) on a machine without the driver or device, asking for a
/// GPU executor is a clear error, and `Auto` still works.
#[test]
fn unavailable_executors_are_clear_errors() {
    if cfg!(feature = "cuda") || cfg!(feature = "webgpu") {
        eprintln!("GPU features are compiled in: only Auto is checked here (the GPU tests cover the rest)");
    } else {
        for kind in [ExecutorKind::WebGpu, ExecutorKind::Cuda] {
            match block_on(Engine::new(kind)) {
                Err(Error::NotCompiledWith(what)) => assert!(what.contains("executor"), "{what}"),
                other => panic!("{kind:?}: expected NotCompiledWith, got {other:?}"),
            }
        }
    }
    assert!(block_on(Engine::new(ExecutorKind::Auto)).is_ok());
}

/// A file's source reads large buffers in pieces on several threads: the bytes are the file's
/// for any read size; a file cut after it was opened ends the stream early (and a reader that
/// wants more gets `Truncated`, no hang); one that grew is read to its new end.
#[test]
fn file_source_reads_in_pieces_and_survives_a_changing_file() {
    use wick::source::{ByteSource, FileSource};
    let dir = std::env::temp_dir().join(format!("wick-file-source-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bytes.bin");
    let data: Vec<u8> = (0..9_000_017u64).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    for size in [1usize, 4093, 1 << 20, (1 << 20) + 7, 4 << 20, 16 << 20] {
        let mut src = block_on(FileSource::open(&path)).unwrap();
        let (mut got, mut buf) = (Vec::new(), vec![0u8; size]);
        loop {
            let n = block_on(src.read(&mut buf)).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got == data, "reads of {size} bytes");
    }

    // Cut to 3 MB after opening: the 4 MiB read gets the 3 MB, then the end.
    let mut src = block_on(FileSource::open(&path)).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(3_000_000).unwrap();
    let mut buf = vec![0u8; 4 << 20];
    assert_eq!(block_on(src.read(&mut buf)).unwrap(), 3_000_000);
    assert_eq!(&buf[..3_000_000], &data[..3_000_000]);
    assert_eq!(block_on(src.read(&mut buf)).unwrap(), 0);
    // Grown back past its first length: read on to the new end.
    std::fs::write(&path, &data[..]).unwrap();
    let mut tail = Vec::new();
    loop {
        let n = block_on(src.read(&mut buf)).unwrap();
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buf[..n]);
    }
    assert!(tail == data[3_000_000..]);

    // A model file cut after it was opened: the load fails with `Truncated`.
    let model = std::fs::read(model_path(SMOLLM2)).unwrap();
    std::fs::write(&path, &model).unwrap();
    let src = block_on(FileSource::open(&path)).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(model.len() as u64 / 2).unwrap();
    let engine = block_on(Engine::new(ExecutorKind::Cpu)).unwrap();
    match block_on(engine.load(src, LoadOptions::default())) {
        Err(Error::Truncated { .. }) => {}
        Err(e) => panic!("expected Truncated, got {e}"),
        Ok(_) => panic!("expected Truncated, got a model"),
    }
    std::fs::remove_dir_all(&dir).ok();
}
