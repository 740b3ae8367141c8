//! Log-probabilities of generated tokens, as OpenAI's `logprobs` / `top_logprobs` report them:
//! the log-softmax of the model's raw logits, before penalties, constraints, temperature or
//! truncation (what llama.cpp's server reports as well).

/// Most alternatives a token may report (OpenAI's limit for `top_logprobs`).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// A token id and its log-probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenLogprob {
    /// Token id.
    pub id: u32,
    /// Natural log of its probability (`-inf` for a token the model gives no probability).
    pub logprob: f32,
}

/// The log-probabilities reported with one generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct Logprobs {
    /// The generated token.
    pub token: TokenLogprob,
    /// The most likely tokens at this step, most likely first (ties: lower id first).
    pub top: Vec<TokenLogprob>,
}

/// Log-probabilities of `id` and of the `top_n` most likely tokens in `logits`. NaN logits are
/// treated as `-inf`; a row with no finite logit gives `-inf` everywhere.
pub fn logprobs(logits: &[f32], id: u32, top_n: usize) -> Logprobs {
    let clean = |l: f32| if l.is_nan() { f32::NEG_INFINITY } else { l.min(f32::MAX) };
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &l| m.max(clean(l)));
    let log_z = if max == f32::NEG_INFINITY {
        f64::INFINITY
    } else {
        let sum: f64 = logits.iter().map(|&l| (clean(l) as f64 - max as f64).exp()).sum();
        max as f64 + sum.ln()
    };
    let lp = |l: f32| (clean(l) as f64 - log_z) as f32;
    let token = TokenLogprob { id, logprob: logits.get(id as usize).map_or(f32::NEG_INFINITY, |&l| lp(l)) };

    let top_n = top_n.min(MAX_TOP_LOGPROBS).min(logits.len());
    // A running list of the best `top_n` (descending logit, ascending id): one pass, O(n * top_n)
    // in the worst case but O(n) in practice since few entries beat the current floor.
    let mut best: Vec<(f32, u32)> = Vec::with_capacity(top_n + 1);
    if top_n > 0 {
        for (i, &l) in logits.iter().enumerate() {
            let l = clean(l);
            if best.len() == top_n && best.last().is_some_and(|&(f, _)| l <= f) {
                continue;
            }
            let at = best.partition_point(|&(f, _)| f >= l);
            best.insert(at, (l, i as u32));
            best.truncate(top_n);
        }
    }
    let top = best.into_iter().map(|(l, i)| TokenLogprob { id: i, logprob: lp(l) }).collect();
    Logprobs { token, top }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_direct_log_softmax() {
        let logits = [1.0f32, 3.0, -2.0, 3.0, f32::NAN, f32::NEG_INFINITY, 0.5];
        let r = logprobs(&logits, 6, 4);
        let z: f64 = logits.iter().filter(|l| l.is_finite()).map(|&l| (l as f64).exp()).sum();
        let want = |l: f32| (l as f64 - z.ln()) as f32;
        assert!((r.token.logprob - want(0.5)).abs() < 1e-6);
        let ids: Vec<u32> = r.top.iter().map(|t| t.id).collect();
        assert_eq!(ids, [1, 3, 0, 6]);
        assert!((r.top[0].logprob - want(3.0)).abs() < 1e-6);
        let total: f64 = r.top.iter().map(|t| (t.logprob as f64).exp()).sum();
        assert!(total <= 1.0 + 1e-6);
    }

    #[test]
    fn degenerate_rows() {
        let r = logprobs(&[f32::NAN, f32::NEG_INFINITY], 0, 5);
        assert_eq!(r.token.logprob, f32::NEG_INFINITY);
        assert_eq!(r.top.len(), 2);
        let r = logprobs(&[], 3, 5);
        assert!(r.top.is_empty());
        assert_eq!(r.token.logprob, f32::NEG_INFINITY);
        let r = logprobs(&[f32::INFINITY, 0.0], 0, 1);
        assert_eq!(r.token.logprob, 0.0);
    }
}
