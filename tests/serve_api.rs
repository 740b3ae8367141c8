//! `wick serve` on the CPU executor with the real SmolLM2, over plain HTTP: 16 concurrent
//! streams each give what the same request gives alone (greedy, up to where batched arithmetic
//! may round a near-tie differently: the agreeing lengths are printed); a second request sharing
//! a 2,000-token system prompt reaches its first token in under 20% of the first one's time; a
//! client that disconnects mid-stream frees its slot; bad bodies, a missing key, an over-long
//! prompt and a full queue get the right status and OpenAI's error object; `/metrics` parses as
//! Prometheus text; tool calls come back whole and streamed as OpenAI shapes them; `n` choices
//! come back by index, each with its seed; and (with `WICK_REQUIRE_OPENAI=1`, as CI sets) the official `openai` Python
//! client streams and non-streams chat and text completions.
#![cfg(all(not(target_arch = "wasm32"), feature = "serve"))]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A running `wick serve`; killed on drop.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tests take turns: each starts a server, and their generations would otherwise share the
/// machine's cores (timings and the queue check want the machine to themselves).
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

fn start(extra: &[&str]) -> Server {
    let model = support::models::model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut child = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["serve", "-m", model.to_str().unwrap(), "--executor", "cpu", "--port", "0", "--no-progress"])
        .args(extra)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start wick serve");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "wick serve ended before listening");
        if let Some(rest) = line.strip_prefix("wick serve: http://") {
            break rest.split('/').next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in err.lines() {});
    Server { child, addr }
}

/// One HTTP/1.1 request; returns (status, headers+body reader positioned at the body).
fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
    key: Option<&str>,
) -> (u16, BufReader<TcpStream>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = key.map(|k| format!("Authorization: Bearer {k}\r\n")).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let code: u16 = status.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("a status line");
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        if h == "\r\n" || h.is_empty() {
            break;
        }
    }
    (code, r)
}

/// The whole body (chunked transfer decoded loosely: SSE and JSON bodies are line-based).
fn body_text(mut r: BufReader<TcpStream>) -> String {
    let mut raw = String::new();
    r.read_to_string(&mut raw).unwrap();
    // Drop chunk-size lines of a chunked body.
    raw.lines()
        .filter(|l| !l.chars().all(|c| c.is_ascii_hexdigit()) || l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

fn json_call(addr: &str, path: &str, body: &Value, key: Option<&str>) -> (u16, Value) {
    let (code, r) = request(addr, "POST", path, Some(body), key);
    let text = body_text(r);
    let start = text.find('{').unwrap_or(0);
    let end = text.rfind('}').map_or(text.len(), |e| e + 1);
    (code, serde_json::from_str(&text[start..end]).unwrap_or_else(|e| panic!("{e}: {text}")))
}

/// The events of a streamed chat completion, each with the moment its `data:` line arrived,
/// up to `[DONE]`.
fn sse_events(addr: &str, body: &Value) -> Vec<(Instant, Value)> {
    let (code, mut r) = request(addr, "POST", "/v1/chat/completions", Some(body), None);
    assert_eq!(code, 200);
    let mut events = Vec::new();
    let mut line = String::new();
    while r.read_line(&mut line).unwrap() > 0 {
        if let Some(data) = line.trim().strip_prefix("data: ") {
            if data == "[DONE]" {
                break;
            }
            events.push((Instant::now(), serde_json::from_str(data).unwrap()));
        }
        line.clear();
    }
    events
}

/// A streamed chat completion: the text, and the time to the first content chunk.
fn stream_chat(addr: &str, body: &Value) -> (String, Duration) {
    let t = Instant::now();
    let mut text = String::new();
    let mut first = None;
    for (at, v) in sse_events(addr, body) {
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            if !c.is_empty() && first.is_none() {
                first = Some(at - t);
            }
            text.push_str(c);
        }
    }
    (text, first.unwrap_or(t.elapsed()))
}

fn chat_body(user: &str, max_tokens: usize, stream: bool) -> Value {
    json!({ "messages": [{ "role": "user", "content": user }], "max_tokens": max_tokens, "temperature": 0, "stream": stream })
}

/// The tokens of a streamed chat completion with their log-probability entries.
fn stream_tokens(addr: &str, body: &Value) -> Vec<Value> {
    let events = sse_events(addr, body);
    events
        .iter()
        .filter_map(|(_, v)| v["choices"][0]["logprobs"]["content"].as_array())
        .flatten()
        .cloned()
        .collect()
}

#[test]
fn concurrent_streams_match_each_alone() {
    let _turn = turn();
    let srv = start(&["--parallel", "16"]);
    let body = |i: usize| {
        json!({ "messages": [{ "role": "user", "content": format!("Write one sentence about the number {}.", i * 7 + 3) }],
                "max_tokens": 24, "temperature": 0, "seed": 100 + i, "stream": true, "logprobs": true, "top_logprobs": 2 })
    };
    let alone: Vec<Vec<Value>> = (0..16).map(|i| stream_tokens(&srv.addr, &body(i))).collect();
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let (addr, b) = (srv.addr.clone(), body(i));
            std::thread::spawn(move || stream_tokens(&addr, &b))
        })
        .collect();
    let together: Vec<Vec<Value>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut agree = Vec::new();
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert!(!a.is_empty() && !t.is_empty(), "stream {i} reported no tokens");
        let n = a.iter().zip(t).take_while(|(x, y)| x["bytes"] == y["bytes"]).count();
        agree.push(n);
        if n < a.len().min(t.len()) {
            // They part where the alone run's top two were close: batched arithmetic rounds
            // differently (llama.cpp's batches do too); a real error would part anywhere.
            let top = a[n]["top_logprobs"].as_array().unwrap();
            let margin = top[0]["logprob"].as_f64().unwrap() - top[1]["logprob"].as_f64().unwrap();
            assert!(margin < 1.0, "stream {i} parts at token {n} where the top-2 margin is {margin:.3}");
        } else {
            assert_eq!(a.len(), t.len(), "stream {i}: same tokens, different lengths");
        }
    }
    eprintln!("tokens agreeing, 16 streams together vs each alone: {agree:?} (of 24 at most)");
}

#[test]
fn shared_system_prompt_is_reused() {
    let _turn = turn();
    let srv = start(&[]);
    let system = "You are a helpful assistant. ".repeat(340); // about 2,000 tokens
    let ask = |q: &str| {
        json!({ "messages": [{ "role": "system", "content": system }, { "role": "user", "content": q }],
                "max_tokens": 4, "temperature": 0, "stream": true })
    };
    let (_, first) = stream_chat(&srv.addr, &ask("Hi"));
    let (_, second) = stream_chat(&srv.addr, &ask("Hello there"));
    eprintln!("time to first token: {first:?} fresh, {second:?} with the shared prefix");
    assert!(second.as_secs_f64() < 0.2 * first.as_secs_f64(), "{second:?} is not under 20% of {first:?}");
    let (_, m) = request(&srv.addr, "GET", "/metrics", None, None);
    let m = body_text(m);
    let cached: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("wick_prompt_tokens_cached_total "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(cached >= 1900.0, "cached prompt tokens {cached}");
}

#[test]
fn disconnect_frees_the_slot_and_errors_are_openai_shaped() {
    let _turn = turn();
    let srv = start(&["--parallel", "1", "--queue", "1"]);
    // A stream cut after three chunks.
    {
        let body = chat_body("Count to one thousand.", 4000, true);
        let (code, mut r) = request(&srv.addr, "POST", "/v1/chat/completions", Some(&body), None);
        assert_eq!(code, 200);
        let mut seen = 0;
        let mut line = String::new();
        while seen < 3 && r.read_line(&mut line).unwrap() > 0 {
            seen += line.starts_with("data: ") as usize;
            line.clear();
        }
    }
    let t = Instant::now();
    let metric = |name: &str| -> f64 {
        let (_, m) = request(&srv.addr, "GET", "/metrics", None, None);
        body_text(m)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")).map(|v| v.trim().parse().unwrap()))
            .unwrap()
    };
    while metric("wick_requests_in_flight") > 0.0 {
        assert!(t.elapsed() < Duration::from_secs(20), "the cut stream still holds its slot");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The slot serves the next request.
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &chat_body("Hi", 3, false), None);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    // Bad bodies.
    for (body, needle) in [
        (json!({ "messages": 5 }), "messages"),
        (json!({ "messages": [{ "role": "user", "content": "x" }], "temperature": "hot" }), "temperature"),
        (json!({ "messages": [{ "role": "user", "content": "x" }], "n": 0 }), "n"),
        (json!({ "messages": [{ "role": "user", "content": "x" }], "n": 65 }), "n"),
        (json!({ "prompt": 7 }), "prompt"),
    ] {
        let path = if body.get("prompt").is_some() { "/v1/completions" } else { "/v1/chat/completions" };
        let (code, v) = json_call(&srv.addr, path, &body, None);
        assert_eq!(code, 400, "{body}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(needle), "{v}");
    }
    let (code, r) = request(&srv.addr, "POST", "/v1/chat/completions", None, None);
    assert_eq!(code, 400, "{}", body_text(r));
    // Over-long prompt.
    let long = "word ".repeat(9000);
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &chat_body(&long, 4, false), None);
    assert_eq!((code, v["error"]["code"].as_str()), (400, Some("context_length_exceeded")), "{v}");
    // Prometheus text: every line a comment or `name value`.
    let (_, m) = request(&srv.addr, "GET", "/metrics", None, None);
    let m = body_text(m);
    for l in m.lines().filter(|l| !l.is_empty()) {
        let ok = l.starts_with("# HELP ") || l.starts_with("# TYPE ") || {
            let mut p = l.split(' ');
            let (name, value) = (p.next().unwrap_or(""), p.next().unwrap_or(""));
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && value.parse::<f64>().is_ok()
                && p.next().is_none()
        };
        assert!(ok, "not Prometheus text: {l:?}");
    }
    assert!(metric("wick_requests_total") >= 2.0, "the cut stream and the request after it");
}

/// Wait until `n` generation requests are queued or running (the metric), for at most a minute.
fn wait_in_flight(srv: &Server, n: usize) {
    let t = Instant::now();
    loop {
        let (_, m) = request(&srv.addr, "GET", "/metrics", None, None);
        let m = body_text(m);
        let now: f64 = m
            .lines()
            .find_map(|l| l.strip_prefix("wick_requests_in_flight "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if now >= n as f64 {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "only {now} of {n} requests in flight after a minute:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_full_queue_is_a_503() {
    let _turn = turn();
    let srv = start(&["--parallel", "1", "--queue", "1"]);
    // A full queue: one running, one queued, the third refused.
    let hold = |n| {
        let addr = srv.addr.clone();
        let mut body = chat_body("Tell me a long story.", n, false);
        body["ignore_eos"] = json!(true);
        std::thread::spawn(move || json_call(&addr, "/v1/chat/completions", &body, None).0)
    };
    let a = hold(400);
    wait_in_flight(&srv, 1);
    let b = hold(400);
    wait_in_flight(&srv, 2);
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &chat_body("Hi", 2, false), None);
    assert_eq!(code, 503, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("busy"), "{v}");
    assert_eq!((a.join().unwrap(), b.join().unwrap()), (200, 200));
}

#[test]
fn api_key_and_small_endpoints() {
    let _turn = turn();
    let srv = start(&["--api-key", "sekret"]);
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &chat_body("Hi", 2, false), None);
    assert_eq!((code, v["error"]["code"].as_str()), (401, Some("invalid_api_key")), "{v}");
    let (code, _) = json_call(&srv.addr, "/v1/chat/completions", &chat_body("Hi", 2, false), Some("wrong"));
    assert_eq!(code, 401);
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &chat_body("Hi", 2, false), Some("sekret"));
    assert_eq!(code, 200, "{v}");
    let (code, _) = request(&srv.addr, "GET", "/health", None, None);
    assert_eq!(code, 200, "/health needs no key");
    let (code, r) = request(&srv.addr, "GET", "/v1/models", None, Some("sekret"));
    assert_eq!(code, 200);
    assert!(body_text(r).contains("\"object\":\"list\""));
    let (_, v) = json_call(&srv.addr, "/tokenize", &json!({ "content": "Hello world" }), Some("sekret"));
    let ids = v["tokens"].clone();
    assert!(ids.as_array().is_some_and(|a| !a.is_empty()), "{v}");
    let (_, v) = json_call(&srv.addr, "/detokenize", &json!({ "tokens": ids }), Some("sekret"));
    assert_eq!(v["content"], "Hello world");
    let (code, v) = json_call(
        &srv.addr,
        "/v1/completions",
        &json!({ "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0 }),
        Some("sekret"),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["usage"]["completion_tokens"], 4);
}

/// The official `openai` Python client against the server (tests/scripts/openai_client.py).
#[test]
fn openai_python_client() {
    let _turn = turn();
    let ok = Command::new("python3").args(["-c", "import openai"]).status().is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("WICK_REQUIRE_OPENAI").as_deref() != Ok("1"),
            "the openai Python package is missing (WICK_REQUIRE_OPENAI=1): pip install openai"
        );
        eprintln!("SKIPPED: no openai Python package (set WICK_REQUIRE_OPENAI=1 to fail instead)");
        return;
    }
    let srv = start(&[]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/openai_client.py");
    let out =
        Command::new("python3").arg(script).arg(format!("http://{}/v1", srv.addr)).output().expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{text}");
    assert!(out.status.success(), "the openai client failed: {text}");
}

/// A tool loop through the server, greedy: under `tool_choice: "auto"` (its lazy grammar) the
/// model calls `get_weather` (finish `tool_calls`), the client sends the call back with its
/// result as a `tool` message, and the second turn answers in text from the result (finish
/// `stop`), with the result counted in its prompt.
#[test]
fn tool_loop_call_result_answer() {
    let _turn = turn();
    let srv = start(&[]);
    let chat = |body: &Value| json_call(&srv.addr, "/v1/chat/completions", body, None);
    let mut body = tool_body(json!("auto"), json!({}));
    body["messages"] = json!([
        { "role": "system", "content": "You can call get_weather(city). To call it, write the call and nothing else. When a tool result comes back, answer the user in one sentence." },
        { "role": "user", "content": "What is the weather in Paris?" },
        { "role": "assistant", "content": "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}" },
        { "role": "user", "content": "And what is the weather in Lyon?" },
    ]);
    let (code, v) = chat(&body);
    assert_eq!(code, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let call = choice["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "get_weather", "{v}");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().expect("arguments")).unwrap();
    let city = args["city"].as_str().expect("a city").to_string();
    let first_prompt = v["usage"]["prompt_tokens"].as_u64().expect("usage");
    let result = format!("{city}: 18 degrees C, sunny");
    body["messages"].as_array_mut().unwrap().extend([
        json!({ "role": "assistant", "content": null, "tool_calls": [call.clone()] }),
        json!({ "role": "tool", "tool_call_id": call["id"].clone(), "content": result }),
    ]);
    let (code, v) = chat(&body);
    assert_eq!(code, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "stop", "{v}");
    assert!(choice["message"]["tool_calls"].is_null(), "{v}");
    let answer = choice["message"]["content"].as_str().expect("a text answer");
    assert!(answer.contains("18"), "the answer does not use the result: {answer:?}");
    assert!(v["usage"]["prompt_tokens"].as_u64().expect("usage") > first_prompt + 8, "{v}");
}

fn tool_body(tool_choice: Value, extra: Value) -> Value {
    let mut b = json!({
        "messages": [
            { "role": "system", "content": "You can call get_weather(city) and add(a, b)." },
            { "role": "user", "content": "What is the weather in Lyon?" },
        ],
        "tools": [
            { "type": "function", "function": { "name": "get_weather", "description": "The weather in a city",
              "parameters": { "type": "object", "properties": { "city": { "type": "string", "maxLength": 30 } }, "required": ["city"] } } },
            { "type": "function", "function": { "name": "add", "description": "Add two numbers",
              "parameters": { "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "number" } }, "required": ["a", "b"] } } },
        ],
        "tool_choice": tool_choice,
        "temperature": 0,
        "max_tokens": 120,
    });
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// Tool calls: `required` and a named function give `message.tool_calls` whose arguments are
/// JSON objects with the required keys and `finish_reason: "tool_calls"`; the stream gives the
/// same call as OpenAI streams it (index, id, type and name first, then argument fragments);
/// `parallel_tool_calls: false` keeps one; a call cut by `max_tokens` is `length` with no call;
/// the history of a call and its result renders; bad tools and choices are 400s.
#[test]
fn tool_calls_whole_and_streamed() {
    let _turn = turn();
    let srv = start(&[]);
    let chat = |body: &Value| json_call(&srv.addr, "/v1/chat/completions", body, None);
    // Required, whole.
    let (code, v) = chat(&tool_body(json!("required"), json!({})));
    assert_eq!(code, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    assert!(choice["message"]["content"].is_null(), "{v}");
    let calls = choice["message"]["tool_calls"].as_array().expect("tool_calls");
    assert!(!calls.is_empty());
    let call = &calls[0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().is_some_and(|s| s.starts_with("call_")));
    let name = call["function"]["name"].as_str().unwrap().to_string();
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    match name.as_str() {
        "get_weather" => assert!(args["city"].is_string(), "{args}"),
        "add" => assert!(args["a"].is_number() && args["b"].is_number(), "{args}"),
        other => panic!("called {other}"),
    }
    // The same request streamed: the same call, in OpenAI's delta order.
    let chunks: Vec<Value> = sse_events(&srv.addr, &tool_body(json!("required"), json!({ "stream": true })))
        .into_iter()
        .map(|(_, v)| v["choices"][0].clone())
        .collect();
    let deltas: Vec<&Value> =
        chunks.iter().filter_map(|c| c["delta"]["tool_calls"].as_array()).flatten().collect();
    let head = deltas.first().expect("a tool_calls delta");
    assert_eq!(head["index"], 0);
    assert_eq!(head["type"], "function");
    assert!(head["id"].is_string());
    assert_eq!(head["function"]["name"], name.as_str());
    let streamed_args: String = deltas
        .iter()
        .filter(|d| d["index"] == 0)
        .filter_map(|d| d["function"]["arguments"].as_str())
        .collect();
    assert_eq!(streamed_args, call["function"]["arguments"].as_str().unwrap());
    assert_eq!(chunks.last().unwrap()["finish_reason"], "tool_calls");
    // A named function, one call only.
    let named = json!({ "type": "function", "function": { "name": "add" } });
    let (code, v) = chat(&tool_body(named, json!({ "parallel_tool_calls": false })));
    assert_eq!(code, 200, "{v}");
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["function"]["name"], "add");
    let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["a"].is_number() && args["b"].is_number(), "{args}");
    // Cut off inside the call: length, and no half call.
    let (code, v) = chat(&tool_body(json!("required"), json!({ "max_tokens": 6 })));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert!(v["choices"][0]["message"]["tool_calls"].is_null(), "{v}");
    // The call and its result in the history, then an answer without tools.
    let mut body = tool_body(json!("none"), json!({ "max_tokens": 8 }));
    body["messages"].as_array_mut().unwrap().extend([
        json!({ "role": "assistant", "content": null, "tool_calls": [{ "id": "call_1", "type": "function",
            "function": { "name": "get_weather", "arguments": "{\"city\": \"Lyon\"}" } }] }),
        json!({ "role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C, sunny" }),
    ]);
    let (code, v) = chat(&body);
    assert_eq!(code, 200, "{v}");
    assert!(v["choices"][0]["message"]["tool_calls"].is_null(), "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
    // Bad tools and choices.
    let mut bad_name = tool_body(json!("auto"), json!({}));
    bad_name["tools"][0]["function"]["name"] = json!("get weather");
    let missing = tool_body(json!({ "type": "function", "function": { "name": "nope" } }), json!({}));
    let no_tools = json!({ "messages": [{ "role": "user", "content": "x" }], "tool_choice": "required" });
    let bad_choice = tool_body(json!("sometimes"), json!({}));
    for (body, needle) in
        [(bad_name, "get weather"), (missing, "nope"), (no_tools, "tools"), (bad_choice, "tool_choice")]
    {
        let (code, v) = chat(&body);
        assert_eq!(code, 400, "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{msg} should name {needle}");
    }
}

/// `response_format` constrains the output (json_schema and json_object, whole and streamed),
/// as do llama.cpp's `grammar` and `json_schema` fields; a bad one is a 400 before any token,
/// as are two constraints, or one together with tools.
#[test]
fn response_format_constrains_the_output() {
    let _turn = turn();
    let srv = start(&["--parallel", "4"]);
    let schema = json!({
        "type": "object",
        "properties": { "name": { "type": "string", "maxLength": 20 }, "age": { "type": "integer" } },
        "required": ["name", "age"],
        "additionalProperties": false
    });
    let mut body = chat_body("Describe a person as JSON.", 80, false);
    body["response_format"] =
        json!({ "type": "json_schema", "json_schema": { "name": "person", "schema": schema } });
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body, None);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    let content = v["choices"][0]["message"]["content"].as_str().unwrap_or_default();
    let person: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{content:?}: {e}"));
    assert!(person["name"].is_string() && person["age"].is_i64(), "{person}");
    assert_eq!(person.as_object().map(|o| o.len()), Some(2), "{person}");

    // Streamed, through a schema that cannot loop.
    let mut body = chat_body("Describe a cat as JSON.", 60, true);
    let cat = json!({
        "type": "object",
        "properties": { "color": { "enum": ["black", "white", "orange"] }, "legs": { "type": "integer", "minimum": 0, "maximum": 8 } },
        "required": ["color", "legs"],
        "additionalProperties": false
    });
    body["response_format"] =
        json!({ "type": "json_schema", "json_schema": { "name": "cat", "schema": cat, "strict": true } });
    let events = sse_events(&srv.addr, &body);
    let text: String = events
        .iter()
        .filter_map(|(_, v)| v["choices"][0]["delta"]["content"].as_str())
        .collect::<Vec<_>>()
        .concat();
    let finish = events.iter().find_map(|(_, v)| v["choices"][0]["finish_reason"].as_str().map(String::from));
    assert_eq!(finish.as_deref(), Some("stop"), "{text:?}");
    let obj: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert!(obj["color"].is_string() && obj["legs"].as_i64().is_some_and(|n| (0..=8).contains(&n)), "{obj}");

    // Any JSON object: it opens as one (SmolLM2 may run to max_tokens inside it).
    let mut body = chat_body("Give me a JSON object about cats.", 12, false);
    body["response_format"] = json!({ "type": "json_object" });
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body, None);
    assert_eq!(code, 200, "{v}");
    let content = v["choices"][0]["message"]["content"].as_str().unwrap_or_default();
    assert!(content.trim_start().starts_with('{'), "{content:?}");

    // llama.cpp's server fields: a GBNF grammar on a text completion, a bare schema.
    let (code, v) = json_call(
        &srv.addr,
        "/v1/completions",
        &json!({ "prompt": "Is the sky blue? Answer:", "max_tokens": 8, "temperature": 0,
                 "grammar": "root ::= \" \" (\"yes\" | \"no\")" }),
        None,
    );
    assert_eq!(code, 200, "{v}");
    assert!(matches!(v["choices"][0]["text"].as_str(), Some(" yes" | " no")), "{v}");
    let mut body = chat_body("A number?", 16, false);
    body["json_schema"] = json!({ "type": "integer", "minimum": 1, "maximum": 9 });
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body, None);
    assert_eq!(code, 200, "{v}");
    let n: i64 =
        v["choices"][0]["message"]["content"].as_str().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    assert!((1..=9).contains(&n), "{v}");
    body["grammar"] = json!("root ::= \"1\"");
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body, None);
    assert_eq!(code, 400, "two constraints: {v}");

    for (format, what) in [
        (json!({ "type": "yaml" }), "unknown type"),
        (
            json!({ "type": "json_schema", "json_schema": { "name": "x", "schema": 5 } }),
            "a schema that is a number",
        ),
        (
            json!({ "type": "json_schema", "json_schema": { "name": "x", "schema": { "$ref": "#/definitions/none" } } }),
            "a reference to nothing",
        ),
    ] {
        let mut body = chat_body("Hi", 8, false);
        body["response_format"] = format;
        let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body, None);
        assert_eq!(code, 400, "{what}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{what}: {v}");
    }
    let mut body = tool_body(json!("auto"), json!({}));
    body["response_format"] = json!({ "type": "json_object" });
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body, None);
    assert_eq!(code, 400, "response_format with tools: {v}");
}

/// `n` choices: each its own sequence of the batch, choice i sampled with seed + i: its first
/// tokens are what the same request alone gives with that seed (only the first few: batched
/// arithmetic may round differently from a sequence alone, which over many sampled tokens can
/// move a draw across a boundary), the choices differ, and streamed they arrive by index with a
/// finish each and one usage chunk; on the chat and the text endpoint.
#[test]
fn n_choices_whole_and_streamed() {
    let _turn = turn();
    let srv = start(&["--parallel", "4"]);
    let body = |n: usize, seed: u64, max_tokens: usize, stream: bool| {
        json!({ "messages": [{ "role": "user", "content": "Name a fruit." }], "max_tokens": max_tokens,
                "temperature": 1.0, "seed": seed, "n": n, "stream": stream,
                "stream_options": if stream { json!({ "include_usage": true }) } else { Value::Null } })
    };
    let texts = |v: &Value| -> Vec<String> {
        let choices = v["choices"].as_array().unwrap();
        for (i, c) in choices.iter().enumerate() {
            assert_eq!(c["index"], i, "{v}");
            assert!(c["finish_reason"].is_string(), "{v}");
        }
        choices.iter().map(|c| c["message"]["content"].as_str().unwrap().to_string()).collect()
    };
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body(3, 40, 8, false), None);
    assert_eq!(code, 200, "{v}");
    let long = texts(&v);
    assert_eq!(long.len(), 3, "{v}");
    assert!(long.iter().any(|t| t != &long[0]), "three seeds, one text: {long:?}");
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert!((3..=24).contains(&completion), "{v}");
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(v["usage"]["total_tokens"].as_u64(), Some(prompt + completion), "the prompt counted once");

    // Two tokens: choice i as the request alone with seed 40 + i.
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body(3, 40, 2, false), None);
    assert_eq!(code, 200, "{v}");
    let short = texts(&v);
    for (i, text) in short.iter().enumerate() {
        let (_, alone) =
            json_call(&srv.addr, "/v1/chat/completions", &body(1, 40 + i as u64, 2, false), None);
        assert_eq!(texts(&alone), std::slice::from_ref(text), "choice {i} of {v}");
    }

    // Streamed: the chunks by index, a finish each, one usage chunk of no choices.
    let events = sse_events(&srv.addr, &body(3, 40, 2, true));
    let mut streamed = vec![String::new(); 3];
    let mut finishes = [0; 3];
    for (_, e) in &events {
        for c in e["choices"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            streamed[i].push_str(c["delta"]["content"].as_str().unwrap_or_default());
            finishes[i] += c["finish_reason"].is_string() as usize;
        }
    }
    assert_eq!(streamed, short);
    assert_eq!(finishes, [1, 1, 1], "a finish per choice");
    let usage: Vec<&Value> = events.iter().filter(|(_, e)| e["usage"].is_object()).map(|(_, e)| e).collect();
    assert_eq!(usage.len(), 1, "one usage chunk");
    assert_eq!(usage[0]["choices"].as_array().map(Vec::len), Some(0));
    assert_eq!(usage[0]["usage"]["completion_tokens"].as_u64(), Some(6));

    // The text endpoint.
    let (code, v) = json_call(
        &srv.addr,
        "/v1/completions",
        &json!({ "prompt": "Apples are", "max_tokens": 5, "temperature": 1.0, "seed": 7, "n": 2 }),
        None,
    );
    assert_eq!(code, 200, "{v}");
    let idx: Vec<u64> =
        v["choices"].as_array().unwrap().iter().map(|c| c["index"].as_u64().unwrap()).collect();
    assert_eq!(idx, [0, 1], "{v}");
    assert!(v["choices"].as_array().unwrap().iter().all(|c| c["text"].is_string()), "{v}");

    // A long prompt is evaluated once: the later choices wait for the first one's prompt and
    // share its whole blocks.
    let cached = || -> u64 {
        let (_, m) = request(&srv.addr, "GET", "/metrics", None, None);
        let m = body_text(m);
        m.lines()
            .find_map(|l| l.strip_prefix("wick_prompt_tokens_cached_total "))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = cached();
    let body = json!({ "messages": [{ "role": "user", "content": "Tell me about apples. ".repeat(150) }],
                       "max_tokens": 2, "temperature": 1.0, "n": 4 });
    let (code, v) = json_call(&srv.addr, "/v1/chat/completions", &body, None);
    assert_eq!(code, 200, "{v}");
    assert_eq!(texts(&v).len(), 4);
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    let shared = (prompt - 1) / 64 * 64;
    assert!(shared >= 512, "a prompt of {prompt} tokens");
    assert!(cached() - before >= 3 * shared, "{} tokens reused, not 3 x {shared}", cached() - before);
}

/// `--context-shift`: a completion three times the window runs to max_tokens (the window
/// shifted as `wick generate --context-shift` shifts a session, so the text is the same);
/// without it the reply ends with "length" when the window is full.
#[test]
fn context_shift_goes_past_the_window() {
    let _turn = turn();
    let prompt = "Once upon a time, in a small village by the sea,";
    let body = json!({ "prompt": prompt, "max_tokens": 600, "temperature": 0, "ignore_eos": true });
    let shifted = {
        let srv = start(&["--ctx", "256", "--parallel", "1", "--context-shift"]);
        let (code, v) = json_call(&srv.addr, "/v1/completions", &body, None);
        assert_eq!(code, 200, "{v}");
        let (_, r) = request(&srv.addr, "GET", "/metrics", None, None);
        let metrics = body_text(r);
        let shifts: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("wick_context_shifts_total "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no shift count in /metrics:\n{metrics}"));
        // Each shift frees half the window after the kept prompt block: 128 positions.
        assert!(shifts >= 3, "{shifts} shifts for 600 tokens in a window of 256");
        v
    };
    assert_eq!(shifted["usage"]["completion_tokens"], 600, "{shifted}");
    assert_eq!(shifted["choices"][0]["finish_reason"], "length");
    // The CLI's session, shifted the same way, writes the same text.
    let model = support::models::model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_wick"))
        .args([
            "generate",
            "-m",
            model.to_str().unwrap(),
            "--executor",
            "cpu",
            "--ctx",
            "256",
            "--context-shift",
        ])
        .args(["--ignore-eos", "--temp", "0", "-n", "600", "--no-progress", "-p", prompt])
        .output()
        .expect("run wick generate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let served = shifted["choices"][0]["text"].as_str().unwrap();
    assert!(text.contains(served) && served.len() > 1000, "served:\n{served}\n\nwick generate:\n{text}");
    // Without the flag the window ends the reply.
    let srv = start(&["--ctx", "256", "--parallel", "1"]);
    let (code, v) = json_call(&srv.addr, "/v1/completions", &body, None);
    assert_eq!(code, 200, "{v}");
    let (p, c) =
        (v["usage"]["prompt_tokens"].as_u64().unwrap(), v["usage"]["completion_tokens"].as_u64().unwrap());
    assert_eq!((p + c, v["choices"][0]["finish_reason"].as_str()), (256, Some("length")), "{v}");
}
