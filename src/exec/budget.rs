//! What memory an executor can give a model: the figure the default context is fitted to
//! ([`crate::model::largest_context`]) and that `wick info` and `Wick.inspect` compare the
//! estimate with.
//!
//! Each executor says what it knows: the CPU the RAM the OS could still hand out
//! (`MemAvailable`) or what the wasm32 heap can still grow to, CUDA the free device memory. WebGPU
//! tells limits, not memory: its budget is a conservative default for the KV cache and scratch
//! ([`WEBGPU_DEFAULT_BUDGET`]) that the caller can raise (`LoadOptions::memory_budget`, the JS
//! `memoryBudget` option), with the binding limit as the most a KV layer may take.

/// What an executor can give a model now, less a safety margin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryBudget {
    /// Bytes for the model's allocations. Before loading this is for the weights too where
    /// [`MemoryBudget::covers_weights`]; once loaded, what is left for KV caches and scratch.
    pub bytes: u64,
    /// Whether the weights take their bytes from the same memory (RAM, CUDA device memory, the
    /// wasm heap). WebGPU's default budget and a caller's budget are for the KV cache and
    /// scratch alone.
    pub covers_weights: bool,
    /// The most one buffer may hold (WebGPU's storage binding limit): a KV layer must fit.
    pub max_buffer: Option<u64>,
    /// Where the figure comes from, for messages ("MemAvailable", "free CUDA memory", ...).
    pub source: String,
    /// The free memory measured, before the margin (`None` for budgets that are not a
    /// measurement: the caller's, WebGPU's default).
    pub free: Option<u64>,
}

/// WebGPU's budget for the KV cache and scratch where the caller gives none: the adapter says
/// nothing of its memory, and a tab shares it with everything else on an integrated GPU, so
/// 1 GiB (about 32k positions for a Llama 3.2 1B, 8k for an 8B; buffers WebGPU fills with zeros when
/// they are made, unlike the CPU's lazily zeroed cache) unless the caller raises it.
pub const WEBGPU_DEFAULT_BUDGET: u64 = 1 << 30;

/// What is kept back from a free-memory figure for everything the estimate leaves out (the
/// OS, other processes' growth, the CUDA context and libraries, allocator slack): a tenth, and
/// at least 256 MiB.
pub fn margin(free: u64) -> u64 {
    (free / 10).max(256 << 20)
}

/// `free` less its [`margin`].
pub fn after_margin(free: u64) -> u64 {
    free.saturating_sub(margin(free))
}

impl MemoryBudget {
    /// A caller's budget for the KV cache and scratch, `bytes` as given (no margin).
    pub fn given(bytes: u64, max_buffer: Option<u64>) -> MemoryBudget {
        MemoryBudget {
            bytes,
            covers_weights: false,
            max_buffer,
            source: "the caller's memory budget".into(),
            free: None,
        }
    }

    /// Free memory of `free` bytes that the weights share, less the margin.
    pub fn free_memory(free: u64, what: &str) -> MemoryBudget {
        MemoryBudget {
            bytes: after_margin(free),
            covers_weights: true,
            max_buffer: None,
            free: Some(free),
            source: format!(
                "{what}: {:.0} MiB, less a {:.0} MiB margin",
                free as f64 / MIB,
                margin(free) as f64 / MIB
            ),
        }
    }

    /// WebGPU's budget: `given` bytes, else [`WEBGPU_DEFAULT_BUDGET`]; a KV layer at most the
    /// adapter's storage binding size.
    pub fn webgpu(given: Option<u64>, max_binding: u64) -> MemoryBudget {
        let (bytes, source) = match given {
            Some(b) => (b, "the caller's memory budget".to_string()),
            None => (
                WEBGPU_DEFAULT_BUDGET,
                "WebGPU's default budget for KV cache and scratch (the adapter reports no memory \
                 size; raise it with the memory budget option)"
                    .to_string(),
            ),
        };
        MemoryBudget { bytes, covers_weights: false, max_buffer: Some(max_binding), source, free: None }
    }
}

const MIB: f64 = (1u64 << 20) as f64;

impl std::fmt::Display for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1} MiB ({})", self.bytes as f64 / MIB, self.source)?;
        if let Some(b) = self.max_buffer {
            write!(f, ", at most {:.0} MiB a buffer", b as f64 / MIB)?;
        }
        Ok(())
    }
}

/// The host's budget: on Linux `MemAvailable` less the margin; in wasm32 what the 4 GiB
/// memory can still grow to, less the margin; elsewhere unknown.
pub fn host() -> Option<MemoryBudget> {
    #[cfg(target_arch = "wasm32")]
    {
        // Pages of 64 KiB in use now; the allocator reuses freed ones, so what is free inside
        // them is not counted (the budget errs low).
        let used = core::arch::wasm32::memory_size(0) as u64 * 65536;
        Some(MemoryBudget::free_memory(
            (4u64 << 30).saturating_sub(used),
            "room left in the 4 GiB wasm memory",
        ))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        Some(MemoryBudget::free_memory(mem_available(&text)?, "MemAvailable"))
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_reads_kib() {
        let t = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   23000000 kB\n";
        assert_eq!(mem_available(t), Some(23_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots kB\n"), None);
        assert_eq!(mem_available("MemAvailable: 5 MB\n"), None);
    }

    #[test]
    fn margin_is_a_tenth_and_at_least_256_mib() {
        assert_eq!(margin(20 << 30), 2 << 30);
        assert_eq!(margin(1 << 30), 256 << 20);
        assert_eq!(after_margin(100 << 20), 0);
        assert_eq!(after_margin(20 << 30), 18 << 30);
        let b = MemoryBudget::free_memory(10 << 30, "MemAvailable");
        assert_eq!(b.bytes, 9 << 30);
        assert!(b.covers_weights && b.to_string().contains("MemAvailable"), "{b}");
    }

    #[test]
    fn webgpu_budget_defaults_to_1_gib_and_takes_the_callers() {
        let d = MemoryBudget::webgpu(None, 128 << 20);
        assert_eq!((d.bytes, d.covers_weights, d.max_buffer), (1 << 30, false, Some(128 << 20)));
        assert_eq!(MemoryBudget::webgpu(Some(6 << 30), 1 << 30).bytes, 6 << 30);
    }
}
