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
    fails_cleanly(&["bench", "-m", m, "--memory-budget", "1073741825"], "1073741825");
}

#[test]
fn bad_sampling_and_executor_are_rejected_before_loading() {
    let m = "/nonexistent/model.gguf";
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--temp", "nan"], "temperature");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--top-p", "1.5"], "top_p");
    fails_cleanly(&["chat", "-m", m, "--repeat-penalty", "0"], "repeat_penalty");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--executor", "tpu"], "unknown executor");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--logit-bias", "13=-200"], "outside -100..100");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--logit-bias", "x=1"], "token id");
    fails_cleanly(&["chat", "-m", m, "--logit-bias", "13"], "ID=BIAS");
}

#[test]
fn synth_options_are_checked_before_the_donor_is_read() {
    let (d, o) = ("/nonexistent/donor.gguf", "/nonexistent/out.gguf");
    fails_cleanly(
        &["synth", "--donor", d, "-o", o, "--embd-type", "Q9_9"],
        "unknown --embd-type 'Q9_9' (one of F32",
    );
    fails_cleanly(&["synth", "--donor", d, "-o", o, "--layers", "0"], "0");
    fails_cleanly(&["synth", "--donor", d, "-o", o, "--distinct-rows", "0"], "0");
}

/// `-p`, `-n` and `-d` take comma lists (as llama-bench's); a bad item is named.
#[test]
fn bench_lists_are_parsed_and_checked() {
    let m = "/nonexistent/model.gguf";
    // Parsed: the error is about the missing file, not the options.
    let (ok, err) = wick(&["bench", "-m", m, "-p", "512,64", "-n", "128,16", "-d", "0,1024,4096,16384"]);
    assert!(!ok && !err.contains("panicked") && err.contains("nonexistent"), "{err}");
    fails_cleanly(&["bench", "-m", m, "-d", "0,abc"], "abc");
    fails_cleanly(&["bench", "-m", m, "-p", "512,99999999999"], "99999999999");
    fails_cleanly(&["bench", "-m", m, "-n", "128,-1"], "-1");
}

/// One row per combination in llama-bench's order (each depth: the pp tests, then the tg
/// tests), and decode floors that grow with the KV cache read at depth.
#[test]
fn bench_runs_every_combination_in_order() {
    let dir = std::env::var_os("WICK_MODELS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"));
    let model = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "{} is missing: run `bash .ci/get-models`", model.display());
    let args =
        ["-p", "4,8", "-n", "2", "-d", "0,16", "-r", "1", "--json", "--executor", "cpu", "--bandwidth", "10"];
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["bench", "-m", model.to_str().unwrap()])
        .args(args)
        .output()
        .expect("run wick");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON rows");
    let tests: Vec<&str> = rows.as_array().unwrap().iter().map(|r| r["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["pp4", "pp8", "tg2", "pp4 @ d16", "pp8 @ d16", "tg2 @ d16"]);
    let row = |i: usize| &rows[i];
    assert!(row(0)["floor_ms_per_token"].is_null() && row(3)["floor_ms_per_token"].is_null());
    // SmolLM2: 30 layers, 3 KV heads of 64, f16 K and V: 23040 bytes per context position.
    // tg2 at depth 0 reads a mean context of 2.5 positions, at depth 16 of 18.5.
    let kv = |i: usize| row(i)["kv_bytes_per_token"].as_f64().unwrap();
    assert!((kv(2) - 2.5 * 23040.0).abs() < 1e-6 && (kv(5) - 18.5 * 23040.0).abs() < 1e-6);
    assert_eq!(row(5)["depth"], 16);
    let floor = |i: usize| row(i)["floor_ms_per_token"].as_f64().unwrap();
    let size = row(2)["size_bytes"].as_f64().unwrap();
    assert!((floor(2) - (size + kv(2)) / 10e9 * 1e3).abs() < 1e-9);
    assert!(floor(5) > floor(2));
}

/// `--json-schema` and `--grammar` are read and parsed before the model loads; a schema that
/// only the vocabulary-aware compiler can reject fails after loading but before any token.
#[test]
fn constraints_are_checked_before_generating() {
    let m = "/nonexistent/model.gguf";
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--json-schema", "{not json"], "not valid JSON");
    fails_cleanly(
        &["generate", "-m", m, "-p", "hi", "--json-schema", "/nonexistent/schema.json"],
        "schema.json",
    );
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--grammar", "/nonexistent/g.lark"], "g.lark");
    fails_cleanly(
        &["generate", "-m", m, "-p", "hi", "--json-schema", "{}", "--grammar", "g"],
        "cannot be used with",
    );
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--logprobs", "21"], "21");

    let dir = std::env::var_os("WICK_MODELS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"));
    let model = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "{} is missing: run `bash .ci/get-models`", model.display());
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_wick"))
            .args(["generate", "-m", model.to_str().unwrap(), "--executor", "cpu", "--no-progress", "--chat"])
            .args(["-p", "Give me a person.", "-n", "60"])
            .args(extra)
            .output()
            .expect("run wick")
    };
    let out = run(&["--json-schema", r#"{"type": "array", "uniqueItems": true}"#]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("uniqueItems") && !err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty(), "generated before failing: {}", String::from_utf8_lossy(&out.stdout));

    let schema = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}},
                     "required": ["name"], "additionalProperties": false}"#;
    let out = run(&["--json-schema", schema, "--temp", "0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the output is JSON");
    assert!(v["name"].is_string() && v.as_object().unwrap().len() == 1, "{v}");
}

/// `--tools FILE` is read and checked before the model loads (bad JSON, bad names, an unknown
/// `--tool-choice`, a forced call beside another constraint); with `--tool-choice required`
/// the reply is a call, printed after the text as one JSON line; with `auto` a call the model
/// starts is forced to parse, and a `--json-object` of the caller's takes over.
#[test]
fn tools_are_checked_and_calls_printed() {
    let dir = std::env::temp_dir().join(format!("wick-cli-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let good = write(
        "tools.json",
        r#"[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}]"#,
    );
    let not_json = write("bad.json", "[{");
    let bad_name = write("name.json", r#"[{"type": "function", "function": {"name": "get weather"}}]"#);
    let m = "/nonexistent/model.gguf";
    fn g<'a>(m: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        [&["generate", "-m", m, "-p", "hi", "--chat"], extra].concat()
    }
    fails_cleanly(&g(m, &["--tools", &not_json]), "not valid JSON");
    fails_cleanly(&g(m, &["--tools", &bad_name]), "get weather");
    fails_cleanly(&g(m, &["--tools", &good, "--tool-choice", "nope"]), "nope");
    fails_cleanly(&g(m, &["--tools", &good, "--tool-choice", "required", "--json-object"]), "constraint");
    fails_cleanly(&["generate", "-m", m, "-p", "hi", "--tools", &good], "--chat");

    let models = std::env::var_os("WICK_MODELS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"));
    let model = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "{} is missing: run `bash .ci/get-models`", model.display());
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["generate", "-m", model.to_str().unwrap(), "--executor", "cpu", "--no-progress", "--chat"])
        .args(["-p", "What is the weather in Lyon?", "-n", "60", "--temp", "0"])
        .args(["--tools", &good, "--tool-choice", "required"])
        .output()
        .expect("run wick");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["finish_reason"], "tool_calls", "{v}");
    let call = &v["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather");
    let args: serde_json::Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
    // `--tool-choice auto`: where the model starts a call (here `{` then `"name"` on the next
    // line, inside other text), the lazy grammar makes it a call of the declared function.
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_wick"))
            .args(["generate", "-m", model.to_str().unwrap(), "--executor", "cpu", "--no-progress", "--chat"])
            .args(["-n", "60", "--temp", "0", "--tools", &good, "--tool-choice", "auto"])
            .args(extra)
            .output()
            .expect("run wick");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let last = stdout.lines().last().expect("output").to_string();
        serde_json::from_str::<serde_json::Value>(&last).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };
    let sys = r#"You call functions by writing {"name": "get_weather", "arguments": {"city": "Paris"}} with the right city."#;
    let v = run(&["--system", sys, "-p", "Call the function for Lyon."]);
    assert_eq!(v["finish_reason"], "tool_calls", "{v}");
    let call = &v["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather", "{v}");
    let args: serde_json::Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert!(args["city"].is_string(), "{args}");
    // With a constraint of the caller's, auto's grammar gives way: the reply is its JSON.
    let v = run(&["-p", "Say hello to Ann.", "--json-object"]);
    assert_eq!(v["finish_reason"], "stop", "{v}");
    let content: serde_json::Value =
        serde_json::from_str(v["content"].as_str().expect("content")).expect("the reply is JSON");
    assert!(content.is_object(), "{content}");
    let _ = std::fs::remove_dir_all(&dir);
}
