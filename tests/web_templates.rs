//! Chat-template limits in the wasm build, in a real browser (`wasm-pack test --headless
//! --chrome`): the hostile templates of tests/chat_limits.rs (nested loops, doubled strings and
//! lists, a self-nesting list) fail with an error naming the limit, in well under a second, so a
//! GGUF file someone links cannot hang or crash the tab.
#![cfg(target_arch = "wasm32")]

use wasm_bindgen_test::*;
use wick::chat::{ChatMessage, ChatTemplate};
use wick::Error;

wasm_bindgen_test_configure!(run_in_browser);

const FUEL: &str = "ran out of fuel";
const SIZE: &str = "exceeded its size budget";

#[wasm_bindgen_test]
fn hostile_templates_fail_fast_in_the_browser() {
    let cases = [
        ("{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}", FUEL),
        ("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", SIZE),
        ("{% set ns = namespace(l=['x']) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|join(',') }}", SIZE),
        ("{% set ns = namespace(l=['x']) %}{% for i in range(64) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}", SIZE),
        ("{{ ('x' * 100000000)|length }}", SIZE),
    ];
    let msgs = [ChatMessage::new("user", "hi")];
    for (source, want) in cases {
        let tmpl = ChatTemplate::new(source, "<s>", "</s>").expect("compiles");
        let t0 = js_sys::Date::now();
        let res = tmpl.render(&msgs, true);
        let ms = js_sys::Date::now() - t0;
        match res {
            Err(Error::Template(msg)) => assert!(msg.contains(want), "{source}: {msg}"),
            Err(e) => panic!("{source}: expected a template error, got {e}"),
            Ok(s) => panic!("{source}: rendered {} bytes", s.len()),
        }
        // Well under a second on a desktop; SwiftShader CI shares two cores.
        assert!(ms < 3000.0, "{source} took {ms} ms");
    }
}
