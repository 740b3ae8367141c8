//! A byte source that stops when a JS `AbortSignal` is aborted, so that an abandoned load
//! stops reading (and uploading) at its next chunk instead of running to the end.

use wasm_bindgen::JsValue;

use crate::source::ByteSource;
use crate::{Error, Result};

/// `inner`, failing with "the load was aborted" once `signal.aborted` is true.
pub(crate) struct Abortable<S> {
    inner: S,
    /// An `AbortSignal`, or `undefined` for none.
    signal: JsValue,
}

impl<S> Abortable<S> {
    pub(crate) fn new(inner: S, signal: JsValue) -> Self {
        Abortable { inner, signal }
    }

    fn aborted(&self) -> bool {
        self.signal.is_object()
            && js_sys::Reflect::get(&self.signal, &JsValue::from_str("aborted"))
                .ok()
                .and_then(|v| v.as_bool())
                .unwrap_or(false)
    }
}

impl<S: ByteSource> ByteSource for Abortable<S> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        if self.aborted() {
            return Err(Error::io("loading the model", "the load was aborted"));
        }
        self.inner.read(buf).await
    }
    fn len_hint(&self) -> Option<u64> {
        self.inner.len_hint()
    }
}
