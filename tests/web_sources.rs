//! The browser byte sources in a real browser (`wasm-pack test --headless --chrome`): every
//! byte arrives in order whatever the chunking, JS failures are errors (never panics), and a
//! URL download that breaks midway resumes with `Range` (or fails clearly when it cannot).
#![cfg(target_arch = "wasm32")]

use js_sys::{Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;
use wick::source::{BlobSource, ByteSource, ReadableStreamSource, UrlOptions, UrlSource};

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(inline_js = r#"
export function makeStream(chunks, errorAtEnd) {
  let i = 0;
  return new ReadableStream({
    pull(c) {
      if (i < chunks.length) c.enqueue(chunks[i++]);
      else if (errorAtEnd) c.error(new TypeError(errorAtEnd));
      else c.close();
    },
  });
}
export function makeBlob(bytes) { return new Blob([bytes]); }
export function blobUrl(bytes) { return URL.createObjectURL(new Blob([bytes])); }
// A fake server for `data`. Its first `failures` bodies break after `breakAfter` bytes, with an
// error (mode 'error') or by ending early (mode 'close'). With `honourRange`, a Range request
// gets 206 and a Content-Range; without, 200 and the whole file. Range headers go to `log`.
export function fakeFetch(data, failures, breakAfter, mode, honourRange, log) {
  let n = 0;
  return (req) => {
    const range = req.headers.get('range');
    log.push(range === null ? '' : range);
    const ranged = range !== null && honourRange;
    const start = ranged ? Number(/bytes=(\d+)-/.exec(range)[1]) : 0;
    const body = data.slice(start);
    const fail = n++ < failures;
    let sent = false;
    const stream = new ReadableStream({
      pull(c) {
        if (!sent) {
          sent = true;
          c.enqueue(fail ? body.slice(0, breakAfter) : body);
        } else if (fail && mode === 'error') c.error(new TypeError('network error (simulated)'));
        else c.close();
      },
    });
    const headers = { 'content-length': String(body.length) };
    if (ranged) headers['content-range'] = `bytes ${start}-${data.length - 1}/${data.length}`;
    return Promise.resolve(new Response(stream, { status: ranged ? 206 : 200, headers }));
  };
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = makeStream)]
    fn make_stream(chunks: &Array, error_at_end: Option<String>) -> web_sys::ReadableStream;
    #[wasm_bindgen(js_name = makeBlob)]
    fn make_blob(bytes: &Uint8Array) -> web_sys::Blob;
    #[wasm_bindgen(js_name = blobUrl)]
    fn blob_url(bytes: &Uint8Array) -> String;
    #[wasm_bindgen(js_name = fakeFetch)]
    fn fake_fetch(
        data: &Uint8Array,
        failures: u32,
        break_after: u32,
        mode: &str,
        honour_range: bool,
        log: &Array,
    ) -> js_sys::Function;
}

/// Deterministic bytes that differ at every offset a bug could shift them to.
fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

/// Everything `src` yields, read `step` bytes at a time.
async fn read_all<S: ByteSource>(mut src: S, step: usize) -> wick::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; step];
    loop {
        let n = src.read(&mut buf).await?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// The chunks of `bytes` cut at `cuts`, as Uint8Arrays, plus one empty chunk and one
/// ArrayBuffer (streams may give either).
fn chunks(bytes: &[u8], cuts: &[usize]) -> Array {
    let arr = Array::new();
    let mut prev = 0;
    for (i, &c) in cuts.iter().chain(std::iter::once(&bytes.len())).enumerate() {
        let part = Uint8Array::from(&bytes[prev..c]);
        if i == 1 {
            arr.push(&part.buffer());
        } else {
            arr.push(&part);
        }
        if i == 0 {
            arr.push(&Uint8Array::new_with_length(0));
        }
        prev = c;
    }
    arr
}

#[wasm_bindgen_test]
async fn readable_stream_yields_every_byte_in_order() {
    let bytes = data(100_000, 1);
    for step in [1, 7, 4096, 1 << 20] {
        let stream = make_stream(&chunks(&bytes, &[3, 5000, 5001, 77_777]), None);
        let src = ReadableStreamSource::new(&stream).unwrap().with_len(bytes.len() as u64);
        assert_eq!(src.len_hint(), Some(bytes.len() as u64));
        let got = read_all(src, step).await.unwrap();
        assert!(got == bytes, "step {step}: {} bytes read, content differs", got.len());
    }
}

#[wasm_bindgen_test]
async fn readable_stream_failures_are_errors() {
    let bytes = data(1000, 2);
    let stream = make_stream(&chunks(&bytes, &[500]), Some("the producer broke".into()));
    let err = read_all(ReadableStreamSource::new(&stream).unwrap(), 64).await.unwrap_err();
    assert!(err.to_string().contains("the producer broke"), "{err}");

    let bad = Array::new();
    bad.push(&JsValue::from_str("not bytes"));
    let err = read_all(ReadableStreamSource::new(&make_stream(&bad, None)).unwrap(), 64).await.unwrap_err();
    assert!(err.to_string().contains("not bytes"), "{err}");

    // A locked stream cannot get a second reader.
    let stream = make_stream(&Array::new(), None);
    let _first = ReadableStreamSource::new(&stream).unwrap();
    let err = ReadableStreamSource::new(&stream).unwrap_err();
    assert!(err.to_string().contains("locked"), "{err}");
}

#[wasm_bindgen_test]
async fn blob_is_read_in_bounded_slices() {
    let bytes = data(250_001, 3);
    let blob = make_blob(&Uint8Array::from(&bytes[..]));
    for (slice, step) in [(1000u32, 333usize), (65_536, 1 << 20), (BlobSource::DEFAULT_SLICE, 4096)] {
        let src = BlobSource::new(&blob).with_slice_size(slice);
        assert_eq!(src.len_hint(), Some(bytes.len() as u64));
        let got = read_all(src, step).await.unwrap();
        assert!(got == bytes, "slice {slice}, step {step}: content differs");
    }
}

#[wasm_bindgen_test]
async fn url_with_the_browsers_fetch() {
    let bytes = data(300_000, 4);
    let url = blob_url(&Uint8Array::from(&bytes[..]));
    let src = UrlSource::open(&url).await.unwrap();
    assert_eq!(src.len_hint(), Some(bytes.len() as u64));
    assert!(read_all(src, 8192).await.unwrap() == bytes);

    let err = UrlSource::open("blob:null/no-such-blob").await.unwrap_err();
    assert!(matches!(err, wick::Error::Io { .. }), "{err}");
}

fn opts(fetch: js_sys::Function, max_retries: u32) -> UrlOptions {
    UrlOptions { max_retries, fetch: Some(fetch) }
}

fn logged(log: &Array) -> Vec<String> {
    log.iter().map(|v| v.as_string().unwrap_or_default()).collect()
}

#[wasm_bindgen_test]
async fn url_resumes_with_range_after_a_broken_body() {
    let bytes = data(200_000, 5);
    let js = Uint8Array::from(&bytes[..]);
    for mode in ["error", "close"] {
        let log = Array::new();
        // Two broken bodies in a row: the first at 70 000 bytes, the resumed one 70 000 later.
        let fetch = fake_fetch(&js, 2, 70_000, mode, true, &log);
        let src = UrlSource::open_with("https://example.invalid/m.gguf", opts(fetch, 2)).await.unwrap();
        assert_eq!(src.len_hint(), Some(bytes.len() as u64));
        let got = read_all(src, 4096).await.unwrap();
        assert!(got == bytes, "{mode}: {} bytes, content differs", got.len());
        assert_eq!(logged(&log), ["", "bytes=70000-", "bytes=140000-"], "{mode}");
    }
}

#[wasm_bindgen_test]
async fn url_resume_failures_are_clear_errors() {
    let bytes = data(50_000, 6);
    let js = Uint8Array::from(&bytes[..]);

    // A server that ignores Range (200 with the whole file) cannot resume.
    let log = Array::new();
    let fetch = fake_fetch(&js, 1, 10_000, "error", false, &log);
    let src = UrlSource::open_with("https://example.invalid/m.gguf", opts(fetch, 3)).await.unwrap();
    let err = read_all(src, 4096).await.unwrap_err().to_string();
    assert!(err.contains("206") && err.contains("at byte 10000"), "{err}");

    // A body that keeps failing gives up after max_retries attempts in a row.
    let log = Array::new();
    let fetch = fake_fetch(&js, 100, 0, "error", true, &log);
    let src = UrlSource::open_with("https://example.invalid/m.gguf", opts(fetch, 2)).await.unwrap();
    let err = read_all(src, 4096).await.unwrap_err().to_string();
    assert!(err.contains("gave up after 2 retries"), "{err}");
    assert_eq!(logged(&log).len(), 3);

    // No retries allowed: the first failure is the error.
    let log = Array::new();
    let fetch = fake_fetch(&js, 1, 100, "error", true, &log);
    let src = UrlSource::open_with("https://example.invalid/m.gguf", opts(fetch, 0)).await.unwrap();
    let err = read_all(src, 4096).await.unwrap_err().to_string();
    assert!(err.contains("network error (simulated)"), "{err}");
}
