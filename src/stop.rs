//! Stop strings over streamed text.
//!
//! Generated text arrives in pieces (one per token), and a stop string may straddle pieces.
//! [`StopMatcher`] holds back the shortest tail that could still grow into a stop string,
//! emits everything before it, and never emits the stop string itself nor anything after it.

/// What [`StopMatcher::push`] lets through.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopResult {
    /// Text that is safe to show now (never part of a stop string).
    pub emit: String,
    /// A stop string was found: generation should end. `emit` holds the text before it.
    pub stopped: bool,
}

/// Finds stop strings in a stream of text pieces. See the module documentation.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored.
    pub fn new(stops: Vec<String>) -> StopMatcher {
        let stops = stops.into_iter().filter(|s| !s.is_empty()).collect();
        StopMatcher { stops, held: String::new(), stopped: false }
    }

    /// Whether a stop string has been seen.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Feed the next piece of text. Once stopped, further pushes emit nothing.
    pub fn push(&mut self, text: &str) -> StopResult {
        if self.stopped {
            return StopResult { emit: String::new(), stopped: true };
        }
        self.held.push_str(text);
        // The earliest stop occurrence wins; the held text before it is emitted.
        let first = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min();
        if let Some(pos) = first {
            self.held.truncate(pos);
            self.stopped = true;
            return StopResult { emit: std::mem::take(&mut self.held), stopped: true };
        }
        let hold = self.partial_suffix_len();
        let cut = self.held.len() - hold;
        let rest = self.held.split_off(cut);
        StopResult { emit: std::mem::replace(&mut self.held, rest), stopped: false }
    }

    /// The text still held back (a possible start of a stop string), released at the end of
    /// generation. Empty once stopped.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Forget all state, ready for a new generation with the same stop strings.
    pub fn reset(&mut self) {
        self.held.clear();
        self.stopped = false;
    }

    /// Length in bytes of the longest suffix of the held text that is a proper prefix of
    /// some stop string. Holding exactly that much is enough: any later match must start
    /// inside it, or it would have been found already.
    fn partial_suffix_len(&self) -> usize {
        let h = self.held.as_bytes();
        let mut best = 0;
        for s in &self.stops {
            let s = s.as_bytes();
            let max = (s.len() - 1).min(h.len());
            for len in (best + 1..=max).rev() {
                let start = h.len() - len;
                if self.held.is_char_boundary(start) && h[start..] == s[..len] {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}
