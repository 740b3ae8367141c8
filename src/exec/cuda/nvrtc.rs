//! NVRTC, the CUDA runtime compiler, loaded by wick itself rather than by cudarc (whose list
//! of library names takes the first that opens, whatever its version). Code from an NVRTC
//! newer than the driver does not load: a CUDA 12 driver refuses NVRTC 13's cubins and its
//! PTX alike. So wick takes the newest NVRTC whose major version is at most the driver's,
//! looking for each major's library by name (the loader's path: `LD_LIBRARY_PATH`, the system
//! folders) and in the usual CUDA install folders; with no driver (compiling only, as CI
//! does) the newest it finds. `WICK_NVRTC` names the library to use instead (a path or a file
//! name). When none fits, the error says what was looked for and what was found.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::PathBuf;
use std::sync::OnceLock;

type Program = *mut c_void;
type Status = c_int;

/// The newest CUDA major version wick knows NVRTC's library names for (newer ones are still
/// found under the unversioned name).
const NEWEST_MAJOR: i32 = 13;
/// The oldest it looks for (NVRTC 11.2 was the first to make cubins).
const OLDEST_MAJOR: i32 = 11;

/// The entry points wick calls (their C signatures, stable since CUDA 11.1).
struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    destroy: unsafe extern "C" fn(*mut Program) -> Status,
}

/// A loaded NVRTC library.
pub struct Nvrtc {
    api: Api,
    /// (major, minor).
    pub version: (i32, i32),
    /// The name or path it was opened by.
    pub name: String,
    // Last: the entry points above point into it.
    _lib: libloading::Library,
}

/// What a compilation makes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// PTX text (the driver compiles it at load).
    Ptx,
    /// The GPU's own machine code (an ELF for the `--gpu-architecture=sm_XY` of the options).
    Cubin,
}

impl Nvrtc {
    /// Open `name` and resolve the entry points; `None` if it does not open or lacks one.
    fn open(name: &str) -> Option<Nvrtc> {
        // SAFETY: opening a library runs its initializers; NVRTC's only set up its own state.
        let lib = unsafe { libloading::Library::new(name) }.ok()?;
        // SAFETY: each symbol is NVRTC's function of that name, with the signature declared in
        // `Api` (nvrtc.h); the pointers are used only while `lib` is held (in the same struct).
        let api = unsafe {
            Api {
                version: *lib.get(b"nvrtcVersion\0").ok()?,
                error_string: *lib.get(b"nvrtcGetErrorString\0").ok()?,
                create: *lib.get(b"nvrtcCreateProgram\0").ok()?,
                compile: *lib.get(b"nvrtcCompileProgram\0").ok()?,
                log_size: *lib.get(b"nvrtcGetProgramLogSize\0").ok()?,
                log: *lib.get(b"nvrtcGetProgramLog\0").ok()?,
                ptx_size: *lib.get(b"nvrtcGetPTXSize\0").ok()?,
                ptx: *lib.get(b"nvrtcGetPTX\0").ok()?,
                cubin_size: *lib.get(b"nvrtcGetCUBINSize\0").ok()?,
                cubin: *lib.get(b"nvrtcGetCUBIN\0").ok()?,
                destroy: *lib.get(b"nvrtcDestroyProgram\0").ok()?,
            }
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two out-parameters.
        if unsafe { (api.version)(&mut major, &mut minor) } != 0 {
            return None;
        }
        Some(Nvrtc { api, version: (major, minor), name: name.to_string(), _lib: lib })
    }

    fn message(&self, status: Status) -> String {
        // SAFETY: NVRTC returns a static NUL-terminated string for any status.
        let s = unsafe { (self.api.error_string)(status) };
        if s.is_null() {
            return format!("NVRTC error {status}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { std::ffi::CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    /// Compile the CUDA C++ `source` with `options`; the error holds NVRTC's log.
    pub fn compile(
        &self,
        source: &str,
        options: &[String],
        out: Output,
    ) -> std::result::Result<Vec<u8>, String> {
        let src = CString::new(source).map_err(|e| e.to_string())?;
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        let check = |s: Status| if s == 0 { Ok(()) } else { Err(self.message(s)) };
        // SAFETY: a valid NUL-terminated source, no name and no headers.
        check(unsafe {
            (self.api.create)(
                &mut prog,
                src.as_ptr(),
                std::ptr::null(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        })?;
        // SAFETY: `prog` was created above and is destroyed once, below; every buffer is sized
        // by the matching size call before NVRTC writes it.
        let result = unsafe {
            let fetch = |size: unsafe extern "C" fn(Program, *mut usize) -> Status,
                         get: unsafe extern "C" fn(Program, *mut c_char) -> Status| {
                let mut n = 0usize;
                check(size(prog, &mut n))?;
                let mut buf = vec![0u8; n];
                check(get(prog, buf.as_mut_ptr().cast()))?;
                Ok::<_, String>(buf)
            };
            match check((self.api.compile)(prog, ptrs.len() as c_int, ptrs.as_ptr())) {
                Err(e) => {
                    let log = fetch(self.api.log_size, self.api.log).unwrap_or_default();
                    let log: Vec<u8> = log.into_iter().take_while(|&c| c != 0).collect();
                    Err(format!("{e}\n{}", String::from_utf8_lossy(&log)))
                }
                Ok(()) => match out {
                    Output::Cubin => fetch(self.api.cubin_size, self.api.cubin),
                    // The PTX size counts its terminating NUL.
                    Output::Ptx => fetch(self.api.ptx_size, self.api.ptx)
                        .map(|b| b.into_iter().take_while(|&c| c != 0).collect()),
                },
            }
        };
        // SAFETY: as above.
        let _ = unsafe { (self.api.destroy)(&mut prog) };
        result
    }
}

/// The NVRTC wick compiles with, chosen and opened once a process (see the module doc).
pub fn get() -> std::result::Result<&'static Nvrtc, String> {
    static NVRTC: OnceLock<std::result::Result<Nvrtc, String>> = OnceLock::new();
    NVRTC.get_or_init(choose).as_ref().map_err(Clone::clone)
}

/// The installed driver's CUDA version (major, minor), if there is a driver.
fn driver_version() -> Option<(i32, i32)> {
    // SAFETY: only tries to open the library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return None;
    }
    let mut v = 0;
    // SAFETY: one out-parameter; needs no cuInit.
    let ok = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }
        == cudarc::driver::sys::CUresult::CUDA_SUCCESS;
    (ok && v > 0).then_some((v / 1000, v % 1000 / 10))
}

fn choose() -> std::result::Result<Nvrtc, String> {
    if let Some(name) = std::env::var("WICK_NVRTC").ok().filter(|v| !v.is_empty()) {
        return Nvrtc::open(&name)
            .ok_or_else(|| format!("WICK_NVRTC={name} is not an NVRTC library that opens"));
    }
    let driver = driver_version();
    let names = candidates(driver.map(|d| d.0), &install_dirs());
    let mut found = Vec::new();
    for name in &names {
        if let Some(lib) = Nvrtc::open(name) {
            if runs_on(lib.version, driver.map(|d| d.0)) {
                super::trace(|| format!("NVRTC {}.{} ({name})", lib.version.0, lib.version.1));
                return Ok(lib);
            }
            found.push(format!("{name} (NVRTC {}.{})", lib.version.0, lib.version.1));
        }
    }
    Err(not_found(driver, &names, &found))
}

/// Whether code from NVRTC `nvrtc` loads on a driver of CUDA major `driver` (`None`: no
/// driver, any will do).
fn runs_on(nvrtc: (i32, i32), driver: Option<i32>) -> bool {
    driver.is_none_or(|d| nvrtc.0 <= d)
}

/// NVRTC's library file name for CUDA major `major`.
fn lib_name(major: i32) -> String {
    if cfg!(windows) {
        // nvrtc64_120_0.dll for all of 12.x; 11.x's last was nvrtc64_112_0.dll.
        let minor = if major == 11 { 2 } else { 0 };
        format!("nvrtc64_{major}{minor}_0.dll")
    } else if cfg!(target_os = "macos") {
        format!("libnvrtc.{major}.dylib")
    } else {
        format!("libnvrtc.so.{major}")
    }
}

/// The libraries to try, best first: each major from the driver's (or the newest wick knows)
/// down, by name and then in each install folder, then the unversioned name.
fn candidates(driver: Option<i32>, dirs: &[PathBuf]) -> Vec<String> {
    let top = driver.unwrap_or(NEWEST_MAJOR).min(NEWEST_MAJOR);
    let mut out = Vec::new();
    for major in (OLDEST_MAJOR..=top).rev() {
        let name = lib_name(major);
        out.push(name.clone());
        for d in dirs {
            let p = d.join(&name);
            if p.exists() {
                out.push(p.to_string_lossy().into_owned());
            }
        }
    }
    out.push(libloading::library_filename("nvrtc").to_string_lossy().into_owned());
    out
}

/// CUDA install folders holding libraries: `$CUDA_PATH`, `$CUDA_HOME`, and every
/// `/usr/local/cuda*`, newest name first.
fn install_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> =
        ["CUDA_PATH", "CUDA_HOME"].iter().filter_map(std::env::var_os).map(PathBuf::from).collect();
    let mut local: Vec<PathBuf> = std::fs::read_dir("/usr/local")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("cuda"))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    local.sort();
    roots.extend(local.into_iter().rev());
    let subdirs = ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib", "bin"];
    roots.iter().flat_map(|r| subdirs.iter().map(move |s| r.join(s))).filter(|d| d.is_dir()).collect()
}

fn not_found(driver: Option<(i32, i32)>, names: &[String], found: &[String]) -> String {
    let tried = names.join(", ");
    match driver {
        Some((major, minor)) if !found.is_empty() => format!(
            "no NVRTC that this CUDA {major}.{minor} driver runs: found only {} (code from an NVRTC newer \
             than the driver does not load); looked for {tried}. Install NVRTC {major}.x (the CUDA toolkit, or \
             `pip install nvidia-cuda-nvrtc-cu{major}` with its lib folder on LD_LIBRARY_PATH), or set WICK_NVRTC \
             to its path",
            found.join(", ")
        ),
        _ => format!(
            "no NVRTC library (the CUDA runtime compiler) found; looked for {tried}. Install the CUDA toolkit \
             or NVRTC alone (`pip install nvidia-cuda-nvrtc`, with its lib folder on LD_LIBRARY_PATH), or set \
             WICK_NVRTC to its path"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nvrtc_newer_than_the_driver_is_refused() {
        assert!(runs_on((13, 0), Some(13)));
        assert!(runs_on((12, 8), Some(13)));
        assert!(runs_on((12, 4), Some(12)));
        assert!(!runs_on((13, 0), Some(12)));
        assert!(runs_on((13, 0), None));
    }

    #[test]
    fn candidates_start_at_the_drivers_major() {
        let linux = cfg!(target_os = "linux");
        let c = candidates(Some(12), &[]);
        if linux {
            assert_eq!(c, ["libnvrtc.so.12", "libnvrtc.so.11", "libnvrtc.so"]);
        }
        assert!(!c.iter().any(|n| n.contains("13")), "{c:?}");
        // No driver, or one newer than wick knows: from the newest known down.
        let c = candidates(None, &[]);
        assert_eq!(c.first(), Some(&lib_name(NEWEST_MAJOR)));
        assert_eq!(candidates(Some(NEWEST_MAJOR + 2), &[]), c);
        // An install folder's copy follows the bare name.
        let dir = std::env::temp_dir().join(format!("wick-nvrtc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(lib_name(12)), b"").unwrap();
        let c = candidates(Some(12), std::slice::from_ref(&dir));
        assert_eq!(c[0], lib_name(12));
        assert_eq!(c[1], dir.join(lib_name(12)).to_string_lossy());
        assert_eq!(c[2], lib_name(11));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_error_names_what_was_found_and_sought() {
        let names = candidates(Some(12), &[]);
        let e = not_found(Some((12, 4)), &names, &["libnvrtc.so (NVRTC 13.0)".into()]);
        assert!(e.contains("CUDA 12.4 driver"), "{e}");
        assert!(e.contains("libnvrtc.so (NVRTC 13.0)"), "{e}");
        assert!(e.contains(&lib_name(12)), "{e}");
        assert!(e.contains("WICK_NVRTC"), "{e}");
        let e = not_found(None, &names, &[]);
        assert!(e.contains("no NVRTC library"), "{e}");
    }

    #[test]
    fn a_named_library_that_does_not_open_is_an_error() {
        assert!(Nvrtc::open("/nonexistent/libnvrtc.so.12").is_none());
    }
}
