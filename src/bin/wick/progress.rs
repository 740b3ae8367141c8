//! A loading progress bar on stderr.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use wick::gguf::Progress;

/// Draws `[=====>    ] 45%  44.1/98.4 MB  120/272 tensors  35 MB/s` on one line.
pub struct Bar {
    start: Instant,
    tty: bool,
    last_pct: i64,
}

impl Bar {
    pub fn new() -> Self {
        Bar { start: Instant::now(), tty: std::io::stderr().is_terminal(), last_pct: -1 }
    }

    pub fn update(&mut self, p: &Progress) {
        let total = p.bytes_total.unwrap_or(0).max(1);
        let pct = (p.bytes_done as f64 / total as f64 * 100.0).min(100.0);
        // Redraw on a terminal at each whole percent; elsewhere log every 10%.
        let step = if self.tty { 1 } else { 10 };
        if (pct as i64) / step == self.last_pct / step && p.tensors_done < p.tensors_total {
            return;
        }
        self.last_pct = pct as i64;
        let width = 30;
        let filled = (pct / 100.0 * width as f64) as usize;
        let bar: String = (0..width)
            .map(|i| {
                if i < filled {
                    '='
                } else if i == filled {
                    '>'
                } else {
                    ' '
                }
            })
            .collect();
        let secs = self.start.elapsed().as_secs_f64().max(1e-3);
        let mb = |b: u64| b as f64 / 1e6;
        let line = format!(
            "loading [{bar}] {pct:3.0}%  {:.1}/{:.1} MB  {}/{} tensors  {:.0} MB/s",
            mb(p.bytes_done),
            mb(total),
            p.tensors_done,
            p.tensors_total,
            mb(p.bytes_done) / secs
        );
        let mut err = std::io::stderr();
        if self.tty {
            let _ = write!(err, "\r{line}\x1b[K");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    pub fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}
