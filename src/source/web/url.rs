//! [`UrlSource`]: a model file over HTTP(S), streamed with `fetch`, resumed with `Range`.
//!
//! A multi-gigabyte download over a flaky connection may break midway; starting over would
//! waste everything already streamed to the device. Because the loader consumes bytes in order,
//! resuming only needs the bytes from the current offset: `Range: bytes=N-`. The server must
//! answer `206 Partial Content` with a `Content-Range` that starts at N (and, when the total is
//! known, the same total: anything else means a different file), otherwise the source fails
//! with a clear error rather than splice two different files together.

use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Headers, Request, RequestInit, Response};

use super::{js_message, JsReader, StreamFailure};
use crate::source::ByteSource;
use crate::{Error, Result};

#[wasm_bindgen]
extern "C" {
    /// The global `fetch` (a `Window` and a worker both have one).
    #[wasm_bindgen(js_name = fetch)]
    fn global_fetch(request: &Request) -> Promise;
    /// The global `setTimeout`.
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &Function, ms: i32) -> JsValue;
}

/// How a [`UrlSource`] fetches.
#[derive(Debug, Clone)]
pub struct UrlOptions {
    /// Resume attempts after the body fails, in a row without any byte arriving in between
    /// (each waits 250 ms, 500 ms, 1 s, ... before its request).
    pub max_retries: u32,
    /// The function called instead of the global `fetch`, with one argument (a `Request`) and
    /// returning a promise of a `Response` (or a `Response`): to add credentials, go through a
    /// cache, or test.
    pub fetch: Option<Function>,
}

impl Default for UrlOptions {
    fn default() -> Self {
        UrlOptions { max_retries: 3, fetch: None }
    }
}

/// A URL's body, streamed; when it fails midway, re-requested from the current offset with
/// `Range: bytes=N-` (see the module docs) at most [`UrlOptions::max_retries`] times in a row.
/// The length comes from `Content-Length` when the server sends it.
pub struct UrlSource {
    url: String,
    opts: UrlOptions,
    body: JsReader,
    /// Bytes delivered so far.
    offset: u64,
    len: Option<u64>,
    /// Failures since the last byte arrived.
    failures: u32,
}

/// Why a resume failed: a network failure may be retried, a protocol mismatch may not.
enum ResumeFailure {
    Retry(String),
    Fatal(Error),
}

impl UrlSource {
    /// `fetch` `url` with the default options and wait for the response headers.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(url, UrlOptions::default()).await
    }

    /// `fetch` `url` and wait for the response headers. An error if the request fails or the
    /// status is not a success.
    pub async fn open_with(url: &str, opts: UrlOptions) -> Result<Self> {
        let context = || format!("fetching {url}");
        let resp = request(url, opts.fetch.as_ref(), None).await.map_err(|m| Error::io(context(), m))?;
        if !resp.ok() {
            return Err(Error::io(context(), format!("HTTP {} {}", resp.status(), resp.status_text())));
        }
        let headers = resp.headers();
        let header = |name: &str| headers.get(name).ok().flatten();
        // With a content encoding (gzip, ...), Content-Length counts the encoded bytes while the
        // body yields decoded ones: neither a length nor byte offsets can be trusted then.
        let encoded = header("content-encoding").is_some_and(|e| !e.eq_ignore_ascii_case("identity"));
        let len = if encoded { None } else { header("content-length").and_then(|v| v.trim().parse().ok()) };
        let body = resp.body().ok_or_else(|| Error::io(context(), "the response has no body"))?;
        Ok(UrlSource { url: url.to_string(), opts, body: JsReader::new(&body)?, offset: 0, len, failures: 0 })
    }

    /// Bytes delivered so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Request the rest of the file from `self.offset` and continue with its body.
    async fn resume(&mut self) -> std::result::Result<(), ResumeFailure> {
        let url = &self.url;
        let resp =
            request(url, self.opts.fetch.as_ref(), Some(self.offset)).await.map_err(ResumeFailure::Retry)?;
        let fatal =
            |m: String| ResumeFailure::Fatal(Error::io(format!("resuming {url} at byte {}", self.offset), m));
        if resp.status() != 206 {
            return Err(fatal(format!(
                "the server answered HTTP {} {} to a Range request instead of 206 Partial Content, \
                 so the download cannot continue where it broke",
                resp.status(),
                resp.status_text()
            )));
        }
        let range = resp.headers().get("content-range").ok().flatten().unwrap_or_default();
        let (start, total) =
            parse_content_range(&range).ok_or_else(|| fatal(format!("bad Content-Range '{range}'")))?;
        if start != self.offset {
            return Err(fatal(format!("Content-Range '{range}' does not start at byte {}", self.offset)));
        }
        match (self.len, total) {
            (Some(len), Some(total)) if len != total => {
                return Err(fatal(format!(
                    "the file is now {total} bytes, not {len} (it changed on the server)"
                )))
            }
            (None, Some(total)) => self.len = Some(total),
            _ => {}
        }
        let body = resp.body().ok_or_else(|| fatal("the response has no body".into()))?;
        self.body = JsReader::new(&body).map_err(ResumeFailure::Fatal)?;
        Ok(())
    }
}

impl ByteSource for UrlSource {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let failure = match self.body.read(buf).await {
                Ok(0) => match self.len {
                    Some(len) if self.offset < len => {
                        format!("the body ended at byte {} of {len}", self.offset)
                    }
                    _ => return Ok(0),
                },
                Ok(n) => {
                    self.offset += n as u64;
                    self.failures = 0;
                    if let Some(len) = self.len.filter(|&l| self.offset > l) {
                        return Err(Error::io(
                            format!("reading {}", self.url),
                            format!("the body is longer than its Content-Length of {len}"),
                        ));
                    }
                    return Ok(n);
                }
                Err(StreamFailure::BadChunk(m)) => return Err(Error::io(format!("reading {}", self.url), m)),
                Err(StreamFailure::Errored(m)) => m,
            };
            self.retry(failure).await?;
        }
    }
    fn len_hint(&self) -> Option<u64> {
        self.len
    }
}

impl UrlSource {
    /// After `failure`, resume the download, retrying network failures up to the limit.
    async fn retry(&mut self, mut failure: String) -> Result<()> {
        loop {
            if self.failures >= self.opts.max_retries {
                return Err(Error::io(
                    format!("reading {} at byte {}", self.url, self.offset),
                    format!("{failure} (gave up after {} retries)", self.failures),
                ));
            }
            sleep_ms(250i32.saturating_mul(1 << self.failures.min(12))).await;
            self.failures += 1;
            match self.resume().await {
                Ok(()) => return Ok(()),
                Err(ResumeFailure::Fatal(e)) => return Err(e),
                Err(ResumeFailure::Retry(m)) => failure = m,
            }
        }
    }
}

impl std::fmt::Debug for UrlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlSource")
            .field("url", &self.url)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("failures", &self.failures)
            .finish()
    }
}

/// `fetch(url)`, with `Range: bytes=FROM-` when resuming; the error is the JS error's text.
async fn request(
    url: &str,
    fetch: Option<&Function>,
    from: Option<u64>,
) -> std::result::Result<Response, String> {
    let init = RequestInit::new();
    if let Some(from) = from {
        let headers = Headers::new().map_err(|e| js_message(&e))?;
        headers.set("Range", &format!("bytes={from}-")).map_err(|e| js_message(&e))?;
        init.set_headers(&headers);
    }
    let req = Request::new_with_str_and_init(url, &init).map_err(|e| js_message(&e))?;
    let pending = match fetch {
        // Promise.resolve accepts a promise or a plain Response from a custom fetch.
        Some(f) => Promise::resolve(&f.call1(&JsValue::NULL, &req).map_err(|e| js_message(&e))?),
        None => global_fetch(&req),
    };
    let resp = JsFuture::from(pending).await.map_err(|e| js_message(&e))?;
    resp.dyn_into::<Response>().map_err(|v| format!("fetch gave {v:?}, not a Response"))
}

/// `bytes START-END/TOTAL` (TOTAL may be `*`) → (START, TOTAL).
fn parse_content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    let (start, end): (u64, u64) = (start.trim().parse().ok()?, end.trim().parse().ok()?);
    if end < start {
        return None;
    }
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((start, total))
}

async fn sleep_ms(ms: i32) {
    let done = Promise::new(&mut |resolve, _reject| {
        set_timeout(&resolve, ms);
    });
    let _ = JsFuture::from(done).await;
}
