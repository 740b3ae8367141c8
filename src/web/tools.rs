//! Tool calls in the JS API: the template's call syntax, the grammar of a forced call, and
//! the Rust call parser ([`crate::chat::tools`]) as a JS class, so the npm package parses
//! calls exactly as `wick serve` does.

use js_sys::{Array, Object};
use wasm_bindgen::prelude::*;

use super::{js_err, options, set, WickModel};
use crate::chat::tools::{
    tool_choice_grammar, validate_tools, ToolCallStream, ToolChoice, ToolDelta, ToolFamily,
};

/// A delta as a plain JS object: `{ content }`, `{ index, id, name }` (a call begins) or
/// `{ index, arguments }` (a fragment of its arguments' JSON text).
fn delta(d: &ToolDelta) -> JsValue {
    let o = Object::new();
    match d {
        ToolDelta::Content(t) => set(&o, "content", t.as_str()),
        ToolDelta::CallStart { index, id, name } => {
            set(&o, "index", *index as f64);
            set(&o, "id", id.as_str());
            set(&o, "name", name.as_str());
        }
        ToolDelta::Arguments { index, fragment } => {
            set(&o, "index", *index as f64);
            set(&o, "arguments", fragment.as_str());
        }
    }
    o.into()
}

fn deltas(ds: &[ToolDelta]) -> Array {
    ds.iter().map(delta).collect()
}

/// The streaming tool-call parser: `push(text)` returns the deltas the text completes,
/// `finish()` returns `{ deltas, unfinished }` (`unfinished`: the raw text of a call cut off,
/// or undefined).
#[wasm_bindgen]
pub struct ToolCallParser {
    inner: ToolCallStream,
}

#[wasm_bindgen]
impl ToolCallParser {
    /// A parser for `family` (a name from `WickModel.toolFamily`), keeping every call when
    /// `parallel`, with call ids `idPrefix0`, `idPrefix1`, ...; `tools`: the request's tools
    /// (or undefined).
    #[wasm_bindgen(constructor)]
    pub fn new(
        family: &str,
        parallel: bool,
        id_prefix: &str,
        tools: JsValue,
    ) -> Result<ToolCallParser, JsValue> {
        let f = ToolFamily::from_name(family)
            .ok_or_else(|| js_err(format!("unknown tool-call family '{family}'")))?;
        let tools = options::json(&tools, "tools").map_err(js_err)?.unwrap_or_default();
        Ok(ToolCallParser {
            inner: ToolCallStream::new(f).parallel(parallel).id_prefix(id_prefix).tools(&tools),
        })
    }

    /// Feed the next piece of text.
    pub fn push(&mut self, text: &str) -> Array {
        deltas(&self.inner.push(text))
    }

    /// Calls given out so far.
    #[wasm_bindgen(getter)]
    pub fn calls(&self) -> usize {
        self.inner.calls()
    }

    /// The text has ended.
    pub fn finish(&mut self) -> JsValue {
        let (ds, unfinished) = self.inner.finish();
        let o = Object::new();
        set(&o, "deltas", deltas(&ds));
        if let Some(u) = unfinished {
            set(&o, "unfinished", u);
        }
        o.into()
    }
}

#[wasm_bindgen]
impl WickModel {
    /// The syntax of this model's tool calls, read from its chat template: `llama3`, `hermes`,
    /// `qwen3-coder`, `mistral`, `mistral-args`, `glm`, `seed-oss`, `nemotron`, `kimi-k2`,
    /// `deepseek-r1`, `deepseek-v3.1`, `gpt-oss` or `generic`.
    #[wasm_bindgen(getter, js_name = toolFamily)]
    pub fn tool_family(&self) -> Result<String, JsValue> {
        let m = self.get()?;
        Ok(m.chat_template().map_or(ToolFamily::Generic, |t| t.tool_family()).name().to_string())
    }

    /// Check OpenAI's `tools` and `tool_choice` and return the Lark grammar that forces the
    /// call (`required`, a named function), the lazy one that lets the model answer in text or
    /// makes a call it starts parse (`auto`), or undefined (`none`). Bad tools or a
    /// choice naming no tool are errors.
    #[wasm_bindgen(js_name = toolChoiceGrammar)]
    pub fn tool_choice_grammar(
        &self,
        tools: JsValue,
        choice: JsValue,
        parallel: bool,
    ) -> Result<Option<String>, JsValue> {
        let m = self.get()?;
        let tools = options::json(&tools, "tools").map_err(js_err)?.unwrap_or_default();
        validate_tools(&tools).map_err(js_err)?;
        let choice = options::json(&choice, "tool_choice").map_err(js_err)?.unwrap_or_default();
        let choice = ToolChoice::from_json(&choice).map_err(js_err)?;
        let family = m.chat_template().map_or(ToolFamily::Generic, |t| t.tool_family());
        let tok = m.tokenizer();
        let special = |text: &str| tok.find_token(text).filter(|&id| tok.is_control(id));
        match tool_choice_grammar(family, &tools, &choice, parallel, &special).map_err(js_err)? {
            Some(crate::Constraint::Lark(g)) => Ok(Some(g)),
            Some(_) => Err(js_err("the tool grammar is not Lark")),
            None => Ok(None),
        }
    }
}
