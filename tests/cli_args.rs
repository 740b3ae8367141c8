//! The CLI rejects absurd or malformed options with a clear error before it loads anything,
//! and never panics (each case below panicked, or loaded the model first, at 20dc835).
#![cfg(not(target_arch = "wasm32"))]

use std::process::Command;

/// Run `wick ARGS`; returns (success, stderr).
fn wick(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_wick")).args(args).output().expect("run wick");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn fails_cleanly(args: &[&str], mentions: &str) {
    let (ok, err) = wick(args);
    assert!(!ok, "wick {args:?} succeeded");
    assert!(!err.contains("panicked"), "wick {args:?} panicked:\n{err}");
    assert!(err.contains(mentions), "wick {args:?}: the error does not mention {mentions:?}:\n{err}");
}

#[test]
fn counts_past_their_range_are_rejected() {
    // A missing model file: the option must be rejected first, so the file is never opened.
    let m = "/nonexistent/model.gguf";
    fails_cleanly(&["bench", "-m", m, "-p", "18446744073709551615"], "18446744073709551615");
    fails_cleanly(&["bench", "-m", m, "-d", "99999999999"], "99999999999");
    fails_cleanly(&["bench", "-m", m, "-r", "0"], "0");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "-n", "-1"], "-1");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--ctx", "4294967296"], "4294967296");
    fails_cleanly(&["bench", "-m", m, "--bandwidth", "nan"], "nan");
}

#[test]
fn bad_sampling_and_executor_are_rejected_before_loading() {
    let m = "/nonexistent/model.gguf";
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--temp", "nan"], "temperature");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--top-p", "1.5"], "top_p");
    fails_cleanly(&["chat", "-m", m, "--repeat-penalty", "0"], "repeat_penalty");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--executor", "tpu"], "unknown executor");
}
