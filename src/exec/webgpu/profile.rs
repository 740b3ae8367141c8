//! Step profiling (natively, `WICK_WEBGPU_PROFILE=1`, or `span` for the GPU span alone): CPU time spent recording and
//! submitting each step and waiting for its result, and, where the adapter has
//! `TIMESTAMP_QUERY_INSIDE_PASSES`, GPU time per recorded command from timestamps written after
//! every dispatch and copy. A summary per compiled graph goes to stderr when the executor is
//! dropped. Timestamps serialize the commands a little more than barriers alone do, so the
//! per-command times are upper bounds; the GPU span of a step is close to the truth.

use std::collections::HashMap;

/// `WICK_WEBGPU_PROFILE=span`: timestamps only before a step's first command and after its
/// last, so that the GPU span is measured without the per-command timestamps' cost (the wall
/// time of a token less this span is the time the GPU waits for the host between steps).
pub fn span_only() -> bool {
    std::env::var("WICK_WEBGPU_PROFILE").as_deref() == Ok("span")
}

/// Timestamp queries of one plan: one before its first command, one after each command.
pub struct StepQueries {
    pub set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    /// Queries written per step (commands + 2).
    pub count: u32,
}

impl StepQueries {
    /// Queries for a plan of `cmds` commands (None above wgpu's query set size).
    pub fn new(device: &wgpu::Device, cmds: usize) -> Option<StepQueries> {
        let count = u32::try_from(cmds + 2).ok().filter(|&c| c <= wgpu::QUERY_SET_MAX_QUERIES)?;
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("step timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let size = 8 * count as u64;
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Some(StepQueries { set, resolve, read, count })
    }

    /// Resolve the step's timestamps and copy them for reading (after the last write).
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.set, 0..self.count, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, 8 * self.count as u64);
    }

    /// The step's timestamps (ticks), once the step has completed.
    pub fn read(&self, device: &wgpu::Device) -> Option<Vec<u64>> {
        let bytes = map_read(device, &self.read, 8 * self.count as u64)?;
        Some(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect())
    }
}

/// Map and copy a MAP_READ buffer natively (blocking poll; the profiler runs only natively).
fn map_read(device: &wgpu::Device, buf: &wgpu::Buffer, size: u64) -> Option<Vec<u8>> {
    let slice = buf.slice(..size);
    let (send, recv) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = send.send(r);
    });
    device.poll(wgpu::PollType::wait_indefinitely()).ok()?;
    recv.recv().ok()?.ok()?;
    let data = slice.get_mapped_range().ok()?.to_vec();
    buf.unmap();
    Some(data)
}

/// Accumulated times of one plan.
#[derive(Default)]
pub struct PlanStats {
    pub steps: u64,
    pub tokens: usize,
    pub record_ns: f64,
    pub wait_ns: f64,
    /// Of `record_ns`: in `queue.submit`, and recording the next step ahead (the plan's
    /// running totals).
    pub submit_ns: f64,
    pub ahead_ns: f64,
    pub gpu_ns: f64,
    /// Per command label: (commands, ns).
    pub per_label: HashMap<String, (u64, f64)>,
}

impl PlanStats {
    /// Add a step's timestamps (`ts[0]` before the first command, `ts[i + 1]` after command
    /// `i`, labelled `labels[i]`; the last is after the readback), `period` ns per tick.
    pub fn add_timestamps(&mut self, ts: &[u64], labels: &[String], period: f64) {
        if ts.len() < 2 {
            return;
        }
        let ns = |a: u64, b: u64| b.saturating_sub(a) as f64 * period;
        self.gpu_ns += ns(ts[0], ts[ts.len() - 1]);
        if ts.len() == 2 && labels.len() > 1 {
            // The span alone (`span_only`).
            return;
        }
        for (i, w) in ts.windows(2).enumerate() {
            let label = labels.get(i).map_or("readback", |s| s.as_str());
            let e = self.per_label.entry(label.to_string()).or_insert((0, 0.0));
            e.0 += 1;
            e.1 += ns(w[0], w[1]);
        }
    }

    /// A table of the averages per step.
    pub fn summary(&self, name: &str) -> String {
        if self.steps == 0 {
            return String::new();
        }
        let n = self.steps as f64;
        let mut out = format!(
            "webgpu profile {name} ({} token(s), {} steps): CPU record+submit {:.1} us (submit {:.1}, \
             next step recorded {:.1}), wait {:.1} us, GPU span {:.1} us per step\n",
            self.tokens,
            self.steps,
            self.record_ns / n / 1e3,
            self.submit_ns / n / 1e3,
            self.ahead_ns / n / 1e3,
            self.wait_ns / n / 1e3,
            self.gpu_ns / n / 1e3
        );
        let mut rows: Vec<_> = self.per_label.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        for (label, (count, t)) in rows {
            out.push_str(&format!(
                "  {:>9.1} us/step {:>5.1} calls/step {:>8.2} us/call  {label}\n",
                t / n / 1e3,
                *count as f64 / n,
                t / *count as f64 / 1e3
            ));
        }
        out
    }
}
