//! Stop strings over streamed pieces.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

use wick::stop::{StopMatcher, StopResult};

fn stops(s: &[&str]) -> StopMatcher {
    StopMatcher::new(s.iter().map(|s| s.to_string()).collect())
}

/// Push all pieces; return (everything emitted incl. flush, stopped, per-push emits).
fn run(m: &mut StopMatcher, pieces: &[&str]) -> (String, bool, Vec<String>) {
    let mut out = String::new();
    let mut emits = Vec::new();
    let mut stopped = false;
    for p in pieces {
        let StopResult { emit, stopped: s } = m.push(p);
        out.push_str(&emit);
        emits.push(emit);
        if s {
            stopped = true;
            break;
        }
    }
    if !stopped {
        out.push_str(&m.flush());
    }
    (out, stopped, emits)
}

/// Every way of splitting `text` into pieces at char boundaries (up to 3 cuts) must give the
/// same result as the whole text at once.
fn all_splits_agree(stop_list: &[&str], text: &str, want: &str, want_stopped: bool) {
    let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
    for &a in &bounds {
        for &b in bounds.iter().filter(|&&b| b >= a) {
            for &c in bounds.iter().filter(|&&c| c >= b) {
                let pieces = [&text[..a], &text[a..b], &text[b..c], &text[c..]];
                let mut m = stops(stop_list);
                let (out, stopped, _) = run(&mut m, &pieces);
                assert_eq!((out.as_str(), stopped), (want, want_stopped), "pieces {pieces:?}");
            }
        }
    }
}

#[test]
fn stop_split_across_pieces() {
    let mut m = stops(&["<|im_end|>"]);
    assert_eq!(m.push("Hello <|im"), StopResult { emit: "Hello ".into(), stopped: false });
    assert_eq!(m.push("_en"), StopResult { emit: "".into(), stopped: false });
    assert_eq!(m.push("d|> trailing"), StopResult { emit: "".into(), stopped: true });
    assert!(m.is_stopped());
    assert_eq!(m.push("more"), StopResult { emit: "".into(), stopped: true });
    assert_eq!(m.flush(), "");
    all_splits_agree(&["<|im_end|>"], "Hello <|im_end|> world", "Hello ", true);
}

#[test]
fn false_start_is_released() {
    let mut m = stops(&["<|im_end|>"]);
    assert_eq!(m.push("a <|im").emit, "a ");
    // "<|im_start" diverges from the stop: all of it comes out.
    assert_eq!(m.push("_start|>x").emit, "<|im_start|>x");
    assert_eq!(m.push("<").emit, "");
    assert_eq!(m.flush(), "<");
    all_splits_agree(&["<|im_end|>"], "a <|im_start|>x<|im_en", "a <|im_start|>x<|im_en", false);
}

#[test]
fn multi_byte_chars() {
    all_splits_agree(&["終わり"], "日本語の終わりです", "日本語の", true);
    all_splits_agree(&["🦀🦀"], "crab 🦀 crab 🦀🦀 end", "crab 🦀 crab ", true);
    all_splits_agree(&["é!"], "café é? é", "café é? é", false);
    let mut m = stops(&["終わり"]);
    assert_eq!(m.push("日本語の終").emit, "日本語の");
    assert_eq!(m.push("わ").emit, "");
    assert_eq!(m.push("x").emit, "終わx");
}

#[test]
fn overlapping_stops_earliest_wins() {
    all_splits_agree(&["abc", "bcd"], "xxabcd", "xx", true);
    all_splits_agree(&["bcd", "abc"], "xxbcabc", "xxbc", true);
    all_splits_agree(&["aab"], "aaab", "a", true); // self-overlapping prefix
    all_splits_agree(&["abab"], "ababab", "", true);
    all_splits_agree(&["</s>", "\n\nUser:"], "ok\n\nUse</s>", "ok\n\nUse", true);
    all_splits_agree(&["</s>", "\n\nUser:"], "ok\n\nUser: hi</s>", "ok", true);
    // A long stop held back while a short one completes.
    all_splits_agree(&["<end_of_turn>", "<e"], "x<end_of_turn>", "x", true);
}

#[test]
fn no_or_empty_stops_pass_everything() {
    let mut m = stops(&[]);
    assert_eq!(m.push("abc").emit, "abc");
    let mut m = stops(&["", ""]);
    assert_eq!(m.push("abc").emit, "abc");
    assert_eq!(m.flush(), "");
    // reset() allows reuse.
    let mut m = stops(&["x"]);
    assert!(m.push("ax").stopped);
    m.reset();
    assert_eq!(m.push("ab"), StopResult { emit: "ab".into(), stopped: false });
}
