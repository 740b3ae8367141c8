//! Chat templates are code from the file: every render is bounded in time and memory
//! (`RenderLimits`), real templates fit the default limits with room to spare, and each way a
//! hostile template can run long or grow (issue 16) fails fast with an error naming the limit.
// Native only: `wasm-pack test` builds every test target for wasm32 (the browser tests are web_*.rs).
#![cfg(not(target_arch = "wasm32"))]

use std::time::{Duration, Instant};

use serde_json::Value as Json;
use wick::chat::{ChatMessage, ChatTemplate, RenderLimits};
use wick::Error;

fn refs() -> Json {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/chat_refs.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read chat_refs.json"))
        .expect("parse chat_refs.json")
}

/// A long conversation: a system prompt, then `turns` user/assistant pairs of `len` bytes each.
fn conversation(turns: usize, len: usize) -> Vec<ChatMessage> {
    let mut msgs = vec![ChatMessage::new("system", "You are a helpful assistant. ".repeat(4))];
    for i in 0..turns {
        let text: String = format!("turn {i}: ")
            .chars()
            .chain("lorem ipsum dolor sit amet, ".chars().cycle())
            .take(len)
            .collect();
        msgs.push(ChatMessage::new("user", text.clone()));
        msgs.push(ChatMessage::new("assistant", text));
    }
    msgs
}

/// The least fuel (and, separately, bytes) a render needs, by bisection.
fn least(tmpl: &ChatTemplate, msgs: &[ChatMessage], fuel: bool) -> u64 {
    let full = RenderLimits { fuel: u64::MAX / 4, bytes: u64::MAX / 4 };
    let ok = |n: u64| {
        let l = if fuel { RenderLimits { fuel: n, ..full } } else { RenderLimits { bytes: n, ..full } };
        tmpl.render_with_limits(msgs, true, l).is_ok()
    };
    let (mut lo, mut hi) = (0u64, 1u64 << 40);
    assert!(ok(hi));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid
        } else {
            lo = mid
        }
    }
    hi
}

/// Every reference template, on short and long conversations, needs well under the default
/// limits: at most a quarter of the fuel and of the bytes.
#[test]
fn real_templates_fit_the_default_limits_with_room() {
    let refs = refs();
    for t in refs["templates"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let tmpl = ChatTemplate::new(
            t["source"].as_str().unwrap(),
            t["bos_token"].as_str().unwrap(),
            t["eos_token"].as_str().unwrap(),
        )
        .unwrap();
        for (turns, len) in [(1, 20), (50, 2000), (500, 100), (20, 50_000)] {
            let msgs = conversation(turns, len);
            let limits = RenderLimits::for_conversation(&msgs);
            let (fuel, bytes) = (least(&tmpl, &msgs, true), least(&tmpl, &msgs, false));
            eprintln!(
                "{name}: {turns} turns of {len} B: fuel {fuel} of {}, bytes {bytes} of {}",
                limits.fuel, limits.bytes
            );
            assert!(
                fuel * 4 <= limits.fuel,
                "{name}, {turns} turns of {len} B: fuel {fuel} of {}",
                limits.fuel
            );
            assert!(
                bytes * 4 <= limits.bytes,
                "{name}, {turns} turns of {len} B: bytes {bytes} of {}",
                limits.bytes
            );
        }
    }
}

/// Render `source` for a short chat with the default limits; the error text and how long it took.
fn hostile(source: &str) -> (String, Duration) {
    let tmpl = ChatTemplate::new(source, "<s>", "</s>").expect("compiles");
    let msgs = [ChatMessage::new("user", "hi")];
    let t0 = Instant::now();
    let res = tmpl.render(&msgs, true);
    let took = t0.elapsed();
    match res {
        Err(Error::Template(msg)) => (msg, took),
        Err(e) => panic!("expected a template error, got {e}"),
        Ok(s) => panic!("a hostile template rendered {} bytes", s.len()),
    }
}

/// Fails with `want` in the message, within a loose time bound (well under a second on a
/// desktop; several seconds allowed for a loaded CI machine and debug builds).
fn assert_stopped(source: &str, want: &str) {
    let (msg, took) = hostile(source);
    assert!(msg.contains(want), "{source}\n  gave: {msg}\n  want: {want}");
    eprintln!("{took:?}: {source}");
    assert!(took < Duration::from_secs(5), "{source} took {took:?}");
}

const FUEL: &str = "ran out of fuel";
const SIZE: &str = "exceeded its size budget";

#[test]
fn nested_range_loops_run_out_of_fuel() {
    // 10^15 iterations: about 11 minutes per 10^10 before fuel.
    assert_stopped(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}",
        FUEL,
    );
}

#[test]
fn string_doubling_hits_the_size_budget() {
    assert_stopped(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        SIZE,
    );
    // `+` on strings too.
    assert_stopped(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
        SIZE,
    );
    // And a captured block that doubles its own content.
    assert_stopped(
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set c %}{{ ns.s }}{{ ns.s }}{% endset %}{% set ns.s = c %}{% endfor %}",
        SIZE,
    );
}

#[test]
fn list_doubling_hits_the_size_budget() {
    // `+` on lists is lazy in minijinja: the doubled list costs nothing until printed or joined.
    assert_stopped(
        "{% set ns = namespace(l=['x']) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|join(',') }}",
        SIZE,
    );
    assert_stopped(
        "{% set ns = namespace(l=['x']) %}{% for i in range(64) %}{% set ns.l = ns.l * 2 %}{% endfor %}{{ ns.l|list|length }}",
        SIZE,
    );
    // A list that holds itself twice per level: small in memory, exponential when printed.
    assert_stopped(
        "{% set ns = namespace(l=['x']) %}{% for i in range(64) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
        SIZE,
    );
}

#[test]
fn repeating_a_string_is_sized_before_it_is_allocated() {
    // minijinja's own cap is 100 MB per repetition; the budget is smaller.
    assert_stopped("{{ ('x' * 100000000)|length }}", SIZE);
    assert_stopped("{{ (['x'] * 100000000)|length }}", SIZE);
}

#[test]
fn printing_a_large_value_many_times_hits_the_size_budget() {
    assert_stopped("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}", SIZE);
    assert_stopped("{% set s = 'x' * 1000000 %}{{ ([s] * 100000)|tojson }}", SIZE);
}

#[test]
fn deeply_nested_values_are_refused() {
    // Printing or dropping a list nested 100000 deep would overflow the stack.
    assert_stopped(
        "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
        "nested deeper than 128",
    );
}

#[test]
fn filters_that_multiply_their_input_are_sized_first() {
    let s = "{% set s = 'x' * 100000 %}";
    assert_stopped(&format!("{s}{{{{ range(100000)|join(s) }}}}"), SIZE);
    assert_stopped(&format!("{s}{{{{ s|replace('', s) }}}}"), SIZE);
    assert_stopped(&format!("{s}{{{{ s.replace('x', s) }}}}"), SIZE);
    assert_stopped(&format!("{s}{{{{ s.join(range(100000)) }}}}"), SIZE);
    assert_stopped(&format!("{s}{{{{ ('{{0}}' * 50000).format(s) }}}}"), SIZE);
    assert_stopped(&format!("{s}{{{{ ('%(a)s' * 50000)|format(a=s) }}}}"), "");
    assert_stopped(&format!("{s}{{{{ ('\\n' * 100000)|indent(100000) }}}}"), SIZE);
    // minijinja alone panics here ("capacity overflow") or aborts.
    assert_stopped("{{ 'x'|indent(18446744073709551615) }}", SIZE);
    assert_stopped("{{ [1]|batch(1000000000000) }}", SIZE);
    assert_stopped("{{ [1]|slice(1000000000000) }}", SIZE);
    assert_stopped("{{ '{:99999999}'.format(1) }}", "above 65536");
    assert_stopped("{{ '%99999999s'|format(1) }}", "above 65536");
}

#[test]
fn reading_a_large_value_over_and_over_runs_out_of_fuel() {
    assert_stopped(
        "{% set s = 'x' * 4000000 %}{% set t = 'x' * 4000000 %}{% for i in range(100000) %}{% if s == t %}{% endif %}{% endfor %}",
        FUEL,
    );
    assert_stopped(
        "{% set s = 'x' * 4000000 %}{% for i in range(100000) %}{{ s.count('y') }}{% endfor %}",
        FUEL,
    );
}

/// Reading a list costs fuel by its items, not only by its bytes: an item takes far longer to
/// read (and measure) than a byte of a string, and at 16 items a unit of fuel a template that
/// read a list of 500,000 empty lists in a loop ran for 1.5 s on its default fuel (found while
/// profiling the chat_template fuzz target); now two items a unit.
#[test]
fn reading_a_long_list_over_and_over_runs_out_of_fuel() {
    for source in [
        "{% set l = [[]] * 500000 %}{% for i in range(100) %}{{ l|length }}{% endfor %}",
        "{% set l = [0] * 500000 %}{% for i in range(100) %}{{ 1 in l }}{% endfor %}",
        "{% set l = [0] * 500000 %}{% for i in range(100) %}{{ l == l }}{% endfor %}",
    ] {
        assert_stopped(source, FUEL);
    }
    // What one read of a list of 1000 numbers costs: about half a unit an item (it was 93 in all).
    let tmpl = ChatTemplate::new("{% set l = [0] * 1000 %}{{ l|length }}", "", "").unwrap();
    let msgs = [ChatMessage::new("user", "hi")];
    let fuel = least(&tmpl, &msgs, true);
    assert!(fuel >= 500, "one read of 1000 items took {fuel} units of fuel");
}

/// A message's fields are read without copying them: a template testing a 1 MiB message a
/// million times (its fuel grows with the message) copied the message at every read and ran
/// for 20 s; now a fifth of a second.
#[test]
fn reading_a_long_message_over_and_over_is_cheap() {
    let msgs = [ChatMessage::new("user", "x".repeat(1 << 20))];
    for source in [
        "{% for i in range(10000) %}{% for j in range(100) %}{% if messages[0].content %}{% endif %}{% endfor %}{% endfor %}",
        "{% set m = messages[0] %}{% for i in range(10000) %}{% for j in range(100) %}{% if m['role'] and m.content %}{% endif %}{% endfor %}{% endfor %}",
    ] {
        let tmpl = ChatTemplate::new(source, "<s>", "</s>").expect("compiles");
        let t0 = Instant::now();
        let res = tmpl.render(&msgs, true);
        let took = t0.elapsed();
        eprintln!("{took:?}: {source}: {:?}", res.as_ref().map(String::len));
        assert!(matches!(&res, Ok(_) | Err(Error::Template(_))), "{res:?}");
        assert!(took < Duration::from_secs(5), "{source} took {took:?}");
    }
}

#[test]
fn the_limits_are_per_render_and_the_template_stays_usable() {
    let tmpl = ChatTemplate::new(
        "{% for m in messages %}{% if m.content == 'loop' %}{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}{% endif %}{{ m.content }}{% endfor %}",
        "",
        "",
    )
    .unwrap();
    assert!(tmpl.render(&[ChatMessage::new("user", "loop")], false).is_err());
    assert_eq!(tmpl.render(&[ChatMessage::new("user", "fine")], false).unwrap(), "fine");
    let tight = RenderLimits { fuel: 3, bytes: 1 << 20 };
    let err = tmpl.render_with_limits(&[ChatMessage::new("user", "fine")], false, tight).unwrap_err();
    assert!(err.to_string().contains("3 units"), "{err}");
}

#[test]
fn constant_folding_builds_nothing_large_at_compile_time() {
    // minijinja folds constant expressions when it compiles, outside any budget: a short
    // template whose constants concatenate to gigabytes must compile quickly and fail at render.
    let t0 = Instant::now();
    let big = "('x' * 100000000)";
    let mut expr = big.to_string();
    for _ in 0..5 {
        expr = format!("({expr} ~ {expr})");
    }
    let tmpl = ChatTemplate::new(&format!("{{{{ {expr}|length }}}}"), "", "").unwrap();
    let err = tmpl.render(&[ChatMessage::new("user", "hi")], false).unwrap_err();
    assert!(err.to_string().contains(SIZE), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_namespace_cannot_hold_itself() {
    // Found by fuzzing: `ns.x = ns` made a reference cycle that leaked at every render (and
    // printing it would recurse without end).
    assert_stopped("{% set ns = namespace(x=0) %}{% set ns.x = ns %}{{ ns }}", "cannot hold itself");
    assert_stopped(
        "{% set a = namespace(x=0) %}{% set b = namespace(x=[a]) %}{% set a.x = {'k': [b]} %}",
        "cannot hold itself",
    );
    let tmpl = ChatTemplate::new("{% set ns = namespace(n=0, l=[]) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.l = ns.l + [m] %}{% endfor %}{{ ns.n }} {{ ns.l|length }}", "", "").unwrap();
    let msgs = [ChatMessage::new("user", "a"), ChatMessage::new("assistant", "b")];
    assert_eq!(tmpl.render(&msgs, false).unwrap(), "2 2");
}
