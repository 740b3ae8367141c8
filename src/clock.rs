//! A monotonic clock for the shared core: `Instant` natively; in wasm (where `Instant` panics)
//! the page's or worker's `performance.now()`, or `Date.now()` where that is missing.

/// Seconds since an arbitrary origin fixed for the process (or page).
pub(crate) fn now_secs() -> f64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64()
    }
    #[cfg(target_arch = "wasm32")]
    {
        use wasm_bindgen::{JsCast, JsValue};
        // `performance` and its `now`, looked up once per thread (this runs per token).
        thread_local! {
            static NOW: Option<(JsValue, js_sys::Function)> = {
                let perf = js_sys::Reflect::get(&js_sys::global(), &"performance".into()).ok();
                perf.and_then(|p| {
                    let f = js_sys::Reflect::get(&p, &"now".into()).ok()?.dyn_into::<js_sys::Function>().ok()?;
                    Some((p, f))
                })
            };
        }
        let now = NOW.with(|n| n.as_ref().and_then(|(p, f)| f.call0(p).ok()?.as_f64()));
        now.unwrap_or_else(js_sys::Date::now) / 1e3
    }
}
