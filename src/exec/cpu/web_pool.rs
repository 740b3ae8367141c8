//! The CPU executor's threads in the browser: Web Workers sharing the module's memory.
//!
//! Only in the threaded build (wasm32 with `+atomics`: a shared `WebAssembly.Memory`, built by
//! `pkg-config/build.sh` with the nightly toolchain). The package's JS (`threads.js`) starts the
//! workers, instantiates the same module over the same memory in each, and calls
//! [`worker_main`] there, which never returns.
//!
//! A job is one parallel loop of the executor ([`super::par::for_each_chunk`]): `n` tasks taken
//! one at a time from a shared counter. The thread that runs the model publishes it, takes
//! tasks itself, then waits for the tasks the workers hold: it spins a little, then, in a
//! worker (the package's default), sleeps in `memory.atomic.wait32` until the last task's
//! notify. A window's main thread may not wait (`memory.atomic.wait32` traps there), so a model
//! run there only spins. Workers spin a while between jobs (a step's loops come back to back,
//! microseconds apart), then sleep until the next job's notify. Sleeping matters when the
//! machine has other work: a thread that spins while the one it waits for is descheduled
//! takes the core that one needs.
//!
//! A job lives on its caller's stack. Workers announce themselves in [`IN_JOB`] before they read
//! the job pointer, and the caller clears the pointer and waits for that count to reach zero
//! before it returns, so no worker can touch a job that is gone (every access is SeqCst: either
//! the worker sees the cleared pointer or the caller sees the worker's count).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering::SeqCst};

/// Workers that have entered [`worker_main`].
static WORKERS: AtomicUsize = AtomicUsize::new(0);
/// Bumped once per job; workers wait for it to change.
static EPOCH: AtomicI32 = AtomicI32::new(0);
/// Workers asleep (or about to sleep) in `memory.atomic.wait32` on [`EPOCH`].
static SLEEPERS: AtomicUsize = AtomicUsize::new(0);
/// The job being run, null between jobs.
static JOB: AtomicPtr<Job<'static>> = AtomicPtr::new(std::ptr::null_mut());
/// Workers between reading [`JOB`] and being done with it.
static IN_JOB: AtomicUsize = AtomicUsize::new(0);
/// A job is running (a second caller, or a task that starts a loop of its own, runs serially).
static BUSY: AtomicBool = AtomicBool::new(false);
/// The caller sleeps on its job's `done` counter (the last task to finish notifies it).
static CALLER_ASLEEP: AtomicBool = AtomicBool::new(false);
/// A worker trapped (a task panicked: the build aborts on panic). The task it held never
/// finishes, so the caller stops waiting for it (see [`worker_died`]).
static DEAD: AtomicBool = AtomicBool::new(false);

/// Spins of a worker's wait loop before it sleeps: tens of microseconds, longer than the gaps
/// between one step's loops.
const SPINS: u32 = 1 << 15;
/// Spins of the caller's wait for the workers' last tasks before it sleeps (where it may).
const CALLER_SPINS: u32 = 1 << 12;
/// The caller's sleep is cut at this many nanoseconds, whatever the notify does.
const CALLER_NAP_NS: i64 = 200_000;

thread_local! {
    static IS_WORKER: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread may block in `memory.atomic.wait32`: not a window's main thread.
    static MAY_WAIT: bool = !js_sys::Reflect::has(&js_sys::global(), &"document".into()).unwrap_or(true);
}

struct Job<'a> {
    task: &'a (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    /// Tasks finished (an i32: the caller waits on it).
    done: AtomicI32,
}

impl Job<'_> {
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, SeqCst);
            if i >= self.n {
                return;
            }
            (self.task)(i);
            if self.done.fetch_add(1, SeqCst) + 1 == self.n as i32 && CALLER_ASLEEP.load(SeqCst) {
                // SAFETY: the job outlives this call (see the module's notes); notify never
                // blocks.
                unsafe { core::arch::wasm32::memory_atomic_notify(self.done.as_ptr(), 1) };
            }
        }
    }
}

/// Threads a parallel loop runs on: the calling thread and the workers.
pub fn threads() -> usize {
    1 + WORKERS.load(SeqCst)
}

/// Run `task(i)` for every `i` in `0..n` on the calling thread and the workers; returns when
/// all are done.
pub fn run(n: usize, task: &(dyn Fn(usize) + Sync)) {
    let nested = IS_WORKER.with(Cell::get);
    if n <= 1 || n > i32::MAX as usize || nested || WORKERS.load(SeqCst) == 0 || BUSY.swap(true, SeqCst) {
        (0..n).for_each(task);
        return;
    }
    let job = Job { task, n, next: AtomicUsize::new(0), done: AtomicI32::new(0) };
    // SAFETY: the pointer is cleared, and every worker that read it has left, before `job` is
    // dropped (below).
    let ptr = &job as *const Job<'_> as *mut Job<'static>;
    JOB.store(ptr, SeqCst);
    EPOCH.fetch_add(1, SeqCst);
    if SLEEPERS.load(SeqCst) > 0 {
        // SAFETY: EPOCH is a live static; notify never blocks.
        unsafe { core::arch::wasm32::memory_atomic_notify(EPOCH.as_ptr(), u32::MAX) };
    }
    job.work();
    let (n32, may_wait) = (n as i32, MAY_WAIT.with(|w| *w));
    let mut spins = 0;
    while job.done.load(SeqCst) < n32 {
        if DEAD.load(SeqCst) {
            // A hang otherwise: trap here too, so that the page's call rejects.
            panic!("a CPU executor thread died (see the console): the model cannot continue");
        }
        if spins < CALLER_SPINS || !may_wait {
            spins += 1;
            std::hint::spin_loop();
            continue;
        }
        CALLER_ASLEEP.store(true, SeqCst);
        let done = job.done.load(SeqCst);
        if done < n32 {
            // SAFETY: `job.done` is live. Returns at once if the count moved since the load,
            // else at the last task's notify (it sees CALLER_ASLEEP, stored before the load)
            // or after the nap.
            unsafe { core::arch::wasm32::memory_atomic_wait32(job.done.as_ptr(), done, CALLER_NAP_NS) };
        }
        CALLER_ASLEEP.store(false, SeqCst);
    }
    JOB.store(std::ptr::null_mut(), SeqCst);
    while IN_JOB.load(SeqCst) != 0 && !DEAD.load(SeqCst) {
        std::hint::spin_loop();
    }
    BUSY.store(false, SeqCst);
}

/// A worker's whole life: wait for a job, take its tasks, repeat. Never returns.
pub fn worker_main() {
    IS_WORKER.with(|w| w.set(true));
    let mut seen = EPOCH.load(SeqCst);
    WORKERS.fetch_add(1, SeqCst);
    loop {
        let mut spins = 0;
        loop {
            let e = EPOCH.load(SeqCst);
            if e != seen {
                seen = e;
                break;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            SLEEPERS.fetch_add(1, SeqCst);
            // SAFETY: EPOCH is a live static. Returns at once if EPOCH is no longer `seen` (a
            // job published after the check above), else when a job's notify comes.
            unsafe { core::arch::wasm32::memory_atomic_wait32(EPOCH.as_ptr(), seen, -1) };
            SLEEPERS.fetch_sub(1, SeqCst);
            spins = 0;
        }
        IN_JOB.fetch_add(1, SeqCst);
        let job = JOB.load(SeqCst);
        if !job.is_null() {
            // SAFETY: the caller keeps the job alive while IN_JOB counts this worker.
            unsafe { (*job).work() };
        }
        IN_JOB.fetch_sub(1, SeqCst);
    }
}

/// Called by `thread.js` when [`worker_main`] threw (its task trapped): the model's thread stops
/// waiting for that worker and fails its step instead of spinning forever.
pub fn worker_died() {
    DEAD.store(true, SeqCst);
}
