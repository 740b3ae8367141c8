//! Acquiring the adapter and device: which features and limits the executor asks for, and
//! the capture of errors wgpu reports out of band.

use std::sync::{Arc, Mutex};

use super::buffers::err;
use crate::Result;

/// A device and what the executor learned while acquiring it.
pub struct Gpu {
    /// The device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// The adapter's limits (all requested).
    pub limits: wgpu::Limits,
    /// The adapter and the precision path, for [`super::WebGpuExecutor::adapter_name`].
    pub adapter: String,
    /// A CPU-emulated adapter (lavapipe, SwiftShader).
    pub software: bool,
    /// `Features::SHADER_F16` is enabled and the kernels use it.
    pub f16: bool,
    /// `Features::SUBGROUP` is enabled (natively only; see the module docs of `webgpu`).
    pub subgroups: bool,
    /// Profiling was asked for (`WICK_WEBGPU_PROFILE=1`, natively).
    pub profiling: bool,
    /// Profiling, on an adapter that can write timestamps inside passes.
    pub timestamps: bool,
    /// The first validation or device error wgpu reported (it reports them out of band).
    error: Arc<Mutex<Option<String>>>,
    /// Why the device was lost, once it was.
    lost: Arc<Mutex<Option<String>>>,
}

/// Whether environment variable `name` is set to `value`.
pub fn env_is(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == value)
}

impl Gpu {
    /// Acquire a device: natively Vulkan unless `WGPU_BACKEND` names other backends, in wasm
    /// the browser's WebGPU. `allow_software: false` refuses CPU-emulated adapters.
    pub async fn acquire(allow_software: bool) -> Result<Gpu> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = if cfg!(target_arch = "wasm32") {
            wgpu::Backends::BROWSER_WEBGPU
        } else {
            wgpu::Backends::VULKAN
        };
        // wgpu's Instance::new panics where `navigator.gpu` cannot be reached (a shared or
        // service worker): ask first, and make a missing WebGPU an error the caller can act on.
        #[cfg(target_arch = "wasm32")]
        if !wgpu::util::is_browser_webgpu_supported().await {
            return Err(err(
                "this browser offers no WebGPU adapter (navigator.gpu is missing, gives no adapter, \
                 or cannot be reached from this kind of worker)",
            ));
        }
        let instance = wgpu::Instance::new(desc.with_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| err(format!("no WebGPU adapter found ({e}); natively, install a Vulkan driver")))?;
        let info = adapter.get_info();
        let software = software_adapter(&info).await;
        if let (false, Some(what)) = (allow_software, &software) {
            return Err(err(format!("the only WebGPU adapter is a software one ({what})")));
        }
        let mut limits = adapter.limits();
        let have = adapter.features();
        let f16 = have.contains(wgpu::Features::SHADER_F16)
            && std::env::var("WICK_WEBGPU_F16").map_or(true, |v| v != "0");
        let subgroups = have.contains(wgpu::Features::SUBGROUP)
            && std::env::var("WICK_WEBGPU_SUBGROUPS").map_or(true, |v| v != "0");
        let profiling = cfg!(not(target_arch = "wasm32"))
            && (env_is("WICK_WEBGPU_PROFILE", "1") || super::profile::span_only());
        let ts_features = wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS
            | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        let timestamps = profiling && have.contains(ts_features);
        let mut features = wgpu::Features::empty();
        if timestamps {
            features |= ts_features;
        }
        if f16 {
            features |= wgpu::Features::SHADER_F16;
        }
        if subgroups {
            features |= wgpu::Features::SUBGROUP;
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wick"),
                required_features: features,
                required_limits: limits.clone(),
                memory_hints: wgpu::MemoryHints::Performance,
                ..Default::default()
            })
            .await
            .map_err(|e| err(format!("requesting a device from '{}' failed: {e}", info.name)))?;
        // WICK_WEBGPU_MAX_BUFFER=<bytes> makes the executor act as if the device's buffer and
        // storage binding limits were that small (only lowers them): buffers beyond it are
        // refused with an error before wgpu is asked, as on a smaller GPU. For tests.
        if let Some(cap) =
            std::env::var("WICK_WEBGPU_MAX_BUFFER").ok().and_then(|v| v.trim().parse::<u64>().ok())
        {
            limits.max_buffer_size = limits.max_buffer_size.min(cap);
            limits.max_storage_buffer_binding_size = limits.max_storage_buffer_binding_size.min(cap);
        }
        let error = Arc::new(Mutex::new(None));
        let sink = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
            if s.is_none() {
                *s = Some(e.to_string());
            }
        }));
        // A lost device (destroyed, a driver reset, the browser's watchdog) stays lost: every
        // later check reports it, and the caller must acquire a new executor.
        let lost = Arc::new(Mutex::new(None));
        let sink = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
            if s.is_none() {
                let why =
                    if message.is_empty() { format!("{reason:?}") } else { format!("{reason:?}: {message}") };
                *s = Some(format!("the device was lost ({why}); load the model again"));
            }
        });
        let path = match (f16, subgroups) {
            (true, true) => "f16, subgroups",
            (true, false) => "f16",
            (false, true) => "f32, subgroups",
            (false, false) => "f32",
        };
        Ok(Gpu {
            device,
            queue,
            limits,
            adapter: format!("{} ({:?}, {:?}, {path})", info.name, info.backend, info.device_type),
            software: software.is_some(),
            f16,
            subgroups,
            profiling,
            timestamps,
            error,
            lost,
        })
    }

    /// The largest storage binding (and buffer) the device allows.
    pub fn max_binding(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size)
    }

    /// An error wgpu reported since the last check, as a wick error.
    pub fn take_error(&self) -> Result<()> {
        if let Some(lost) = self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(err(lost));
        }
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(err(format!("device error: {e}"))),
            None => Ok(()),
        }
    }

    /// Whether the device was lost.
    #[cfg(target_arch = "wasm32")]
    pub fn is_lost(&self) -> bool {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Read `size` bytes of a MAP_READ buffer ([`super::buffers::read`]). Where the map fails
    /// because the device was lost (or wgpu reported an error first), that is the error: a
    /// failed map says only that it failed.
    pub async fn read(&self, buf: &wgpu::Buffer, size: u64) -> Result<Vec<u8>> {
        self.read_after(buf, size, None).await
    }

    /// [`Gpu::read`], natively waiting only for submission `until` (`None`: all).
    pub async fn read_after(
        &self,
        buf: &wgpu::Buffer,
        size: u64,
        until: Option<wgpu::SubmissionIndex>,
    ) -> Result<Vec<u8>> {
        match super::buffers::read(&self.device, buf, size, until).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.take_error()?;
                Err(e)
            }
        }
    }

    /// Wait for the submission `index` (natively; the browser has no blocking wait).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait_for(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: None })
            .map_err(|e| err(format!("device lost: {e}")))?;
        Ok(())
    }

    /// Wait for submitted work (natively; the browser has no blocking wait).
    pub fn wait(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| err(format!("device lost: {e}")))?;
        Ok(())
    }
}

/// Names of CPU-emulated GPUs, as drivers and browsers report them.
const SOFTWARE_NAMES: [&str; 4] = ["swiftshader", "llvmpipe", "lavapipe", "software"];

/// What makes `info`'s adapter a software (CPU-emulated) one, if it is: the driver says so
/// (natively a CPU device type; in the browser `isFallbackAdapter`), or its name is one of the
/// CPU rasterizers. In the browser wgpu passes on only the description, often empty, so the
/// page's own `GPUAdapterInfo` (vendor, architecture, device) is read too: headless Chromium's
/// SwiftShader says "swiftshader" there.
async fn software_adapter(info: &wgpu::AdapterInfo) -> Option<String> {
    let named = |s: &str| SOFTWARE_NAMES.iter().any(|k| s.to_lowercase().contains(k));
    if info.device_type == wgpu::DeviceType::Cpu || named(&info.name) {
        return Some(if info.name.is_empty() { "a fallback adapter".into() } else { info.name.clone() });
    }
    #[cfg(target_arch = "wasm32")]
    if let Some(desc) = browser_adapter_info().await.filter(|d| named(d)) {
        return Some(desc);
    }
    None
}

/// The browser's own description of its preferred adapter ("vendor architecture device
/// description" of `GPUAdapterInfo`), read through `navigator.gpu` (in a page or a worker).
#[cfg(target_arch = "wasm32")]
async fn browser_adapter_info() -> Option<String> {
    use js_sys::Reflect;
    use wasm_bindgen::JsCast;
    let get =
        |o: &wasm_bindgen::JsValue, k: &str| Reflect::get(o, &k.into()).ok().filter(|v| !v.is_undefined());
    let gpu = get(&get(&js_sys::global(), "navigator")?, "gpu")?;
    let request: js_sys::Function = get(&gpu, "requestAdapter")?.dyn_into().ok()?;
    let opts = js_sys::Object::new();
    Reflect::set(&opts, &"powerPreference".into(), &"high-performance".into()).ok()?;
    let promise: js_sys::Promise = request.call1(&gpu, &opts).ok()?.dyn_into().ok()?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok().filter(|a| !a.is_null())?;
    let info = get(&adapter, "info")?;
    let text = ["vendor", "architecture", "device", "description"]
        .iter()
        .filter_map(|k| get(&info, k).and_then(|v| v.as_string()))
        .collect::<Vec<_>>()
        .join(" ");
    Some(text.trim().to_string())
}

/// Refuse a buffer of `size` bytes that a device with `limits` cannot hold as one buffer (and,
/// with `storage`, bind as one storage binding), naming `what`, before wgpu is asked: beyond
/// its limits wgpu reports a validation error (or panics, where no handler is set).
pub fn check_size(limits: &wgpu::Limits, what: &str, size: u64, storage: bool) -> Result<()> {
    if size > limits.max_buffer_size {
        return Err(err(format!(
            "{what} needs a buffer of {size} bytes, more than this device allows ({} bytes)",
            limits.max_buffer_size
        )));
    }
    if storage && size > limits.max_storage_buffer_binding_size {
        return Err(err(format!(
            "{what} needs a storage binding of {size} bytes, more than this device allows ({} bytes)",
            limits.max_storage_buffer_binding_size
        )));
    }
    Ok(())
}

/// Run `f` (creating buffers, shaders, pipelines) inside validation, out-of-memory and internal
/// error scopes and return what they caught as an error naming `what`. Natively wgpu resolves
/// the scopes at once; in the browser they resolve later, so there `f`'s value is returned and
/// what its scopes catch is reported by the device's next asynchronous call ([`Gpu::settle`]:
/// finishing an upload, a step, a KV read).
pub fn scoped<T>(device: &wgpu::Device, what: &str, f: impl FnOnce() -> T) -> Result<T> {
    #[cfg(target_arch = "wasm32")]
    {
        let scopes = Scopes::push(device);
        let value = f();
        let caught = Box::pin(scopes.pop(what.to_string()));
        DEFERRED.with(|d| d.borrow_mut().push((device.clone(), caught)));
        Ok(value)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        // Innermost first.
        let errors = [ready(validation.pop()), ready(oom.pop()), ready(internal.pop())];
        match errors.into_iter().flatten().next() {
            None => Ok(value),
            Some(e) => Err(scope_error(what, e)),
        }
    }
}

/// An error an error scope caught, as a wick error naming `what`.
fn scope_error(what: &str, e: wgpu::Error) -> crate::Error {
    match e {
        wgpu::Error::OutOfMemory { .. } => err(format!("{what}: out of device memory")),
        e => err(format!("{what} failed: {e}")),
    }
}

/// Validation, out-of-memory and internal error scopes held open across several calls, in the
/// browser, where a scope's errors are known only asynchronously: the weight upload and each
/// step run inside them, and [`Scopes::pop`] awaits what they caught, so that a buffer the
/// browser refused (out of memory, beyond a limit) fails the load itself rather than the first
/// generation, and a failed step fails that step rather than the next one.
#[cfg(target_arch = "wasm32")]
pub struct Scopes(Vec<wgpu::ErrorScopeGuard>);

#[cfg(target_arch = "wasm32")]
impl Scopes {
    /// Open the scopes on `device`.
    pub fn push(device: &wgpu::Device) -> Scopes {
        Scopes(vec![
            device.push_error_scope(wgpu::ErrorFilter::Internal),
            device.push_error_scope(wgpu::ErrorFilter::OutOfMemory),
            device.push_error_scope(wgpu::ErrorFilter::Validation),
        ])
    }

    /// Close the scopes now; the future resolves to the first error they caught, naming `what`.
    pub fn pop(mut self, what: impl Into<String>) -> impl std::future::Future<Output = Result<()>> {
        let what = what.into();
        let mut guards = std::mem::take(&mut self.0);
        // Innermost first: wgpu insists on the reverse order of the pushes.
        let mut pops = Vec::with_capacity(guards.len());
        while let Some(g) = guards.pop() {
            pops.push(g.pop());
        }
        async move {
            let mut first = None;
            for p in pops {
                if let (None, Some(e)) = (&first, p.await) {
                    first = Some(scope_error(&what, e));
                }
            }
            first.map_or(Ok(()), Err)
        }
    }
}

/// What the scopes of a [`scoped`] call will say, once resolved.
#[cfg(target_arch = "wasm32")]
type Caught = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>>>>;

#[cfg(target_arch = "wasm32")]
thread_local! {
    /// The scopes of [`scoped`] calls not yet reported, with their device (a page may hold
    /// several); [`Gpu::settle`] takes its device's.
    static DEFERRED: std::cell::RefCell<Vec<(wgpu::Device, Caught)>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(target_arch = "wasm32")]
impl Gpu {
    /// What the scopes of this device's [`scoped`] calls caught since the last settle: the
    /// calls are taken now, the future resolves to the first error (in the browser).
    pub fn settle(&self) -> impl std::future::Future<Output = Result<()>> {
        let mine = self.forget_deferred();
        async move {
            let mut first = None;
            for c in mine {
                if let (None, Err(e)) = (&first, c.await) {
                    first = Some(e);
                }
            }
            first.map_or(Ok(()), Err)
        }
    }

    /// Take this device's unreported [`scoped`] calls (an executor being dropped forgets them).
    pub fn forget_deferred(&self) -> Vec<Caught> {
        DEFERRED.with(|d| {
            let mut d = d.borrow_mut();
            let (mine, rest): (Vec<_>, Vec<_>) = d.drain(..).partition(|(dev, _)| *dev == self.device);
            *d = rest;
            mine.into_iter().map(|(_, c)| c).collect()
        })
    }
}

#[cfg(target_arch = "wasm32")]
impl Drop for Scopes {
    fn drop(&mut self) {
        // Dropping a guard pops its scope; innermost first (a load that failed midway).
        while let Some(g) = self.0.pop() {
            drop(g);
        }
    }
}

/// The value of a future that native wgpu resolves immediately (None if it has not).
#[cfg(not(target_arch = "wasm32"))]
fn ready<T>(f: impl std::future::Future<Output = Option<T>>) -> Option<T> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => None,
    }
}
