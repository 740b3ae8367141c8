//! Tool calls in a model's output: the call syntax of each chat-template family, parsed whole
//! ([`parse_tool_calls`]) or piece by piece as tokens arrive ([`ToolCallStream`]), and the
//! grammar that forces a call for `tool_choice` ([`tool_choice_grammar`]).
//!
//! The families ([`ToolFamily`]) and what their calls look like:
//! - Llama 3.1/3.2: `{"name": "f", "parameters": {...}}`, possibly after `<|python_tag|>`;
//! - Hermes (Qwen 2.5, Qwen 3, Hermes 2/3): `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`;
//! - Qwen3-Coder: `<tool_call><function=f><parameter=p>value</parameter></function></tool_call>`;
//! - Mistral: `[TOOL_CALLS][{"name": "f", "arguments": {...}}]`, and the newer
//!   `[TOOL_CALLS]f[ARGS]{...}`;
//! - GLM 4.5/4.6/4.7 (and Ling, Laguna): `<tool_call>f\n<arg_key>p</arg_key>\n<arg_value>v</arg_value>\n</tool_call>`;
//! - Seed-OSS: `<seed:tool_call>\n<function=f>\n<parameter=p>v</parameter>\n</function>\n</seed:tool_call>`;
//! - NVIDIA Nemotron Nano 2: `<TOOLCALL>[{"name": "f", "arguments": {...}}]</TOOLCALL>`;
//! - Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>`;
//! - DeepSeek V3/R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>`,
//!   and V3.1's `<｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` (each family reads both);
//! - gpt-oss (harmony): `<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>`,
//!   or with the recipient before the channel (`<|start|>assistant to=functions.f<|channel|>commentary json<|message|>`);
//! - generic: a bare JSON object `{"name": "f", "arguments": {...}}` (or `{"tool_call": {...}}`,
//!   `{"tool_calls": [...]}`), and `<tool_call>` tags as Hermes writes them.
//!
//! The family is read from the chat template's text ([`ToolFamily::detect`]): the markers it
//! contains. Text that looks like the start of a call is held back while it might still be
//! one; a call is reported once it is complete and parses (its arguments in one fragment after
//! its name), so a malformed call comes back as content and never as half a call. A call still
//! open when the text ends is reported as unfinished (the caller's `finish_reason: "length"`).
//!
//! The format notes follow llama.cpp's `common/chat.cpp` (read, not copied) and the families'
//! own chat templates.

mod calls;
mod choice;
mod harmony;
mod markers;
mod sections;
mod stream;
mod syntax;

pub use choice::{tool_choice_grammar, validate_tools, ToolChoice};
pub use stream::{ToolCallStream, ToolDelta};

/// The syntax of tool calls a model was trained on, named after its chat-template family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFamily {
    /// Llama 3.1/3.2: JSON `{"name", "parameters"}`, possibly after `<|python_tag|>`.
    Llama3,
    /// Hermes 2/3, Qwen 2.5 and Qwen 3: `<tool_call>` + JSON `{"name", "arguments"}` + `</tool_call>`.
    Hermes,
    /// Qwen3-Coder: `<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>`.
    Qwen3Coder,
    /// Mistral (v3 tokenizer): `[TOOL_CALLS]` + a JSON list of `{"name", "arguments"}`.
    Mistral,
    /// Mistral (v11 tokenizer and later): `[TOOL_CALLS]NAME[ARGS]{...}`, one per call.
    MistralArgs,
    /// GLM 4.5 to 4.7 (and Ling 3, Laguna): `<tool_call>NAME` + `<arg_key>K</arg_key><arg_value>V</arg_value>`
    /// pairs + `</tool_call>`.
    Glm,
    /// Seed-OSS: `<seed:tool_call>` + Qwen3-Coder's `<function=NAME><parameter=P>` XML + `</seed:tool_call>`.
    SeedOss,
    /// NVIDIA Nemotron Nano 2: `<TOOLCALL>` + a JSON list of `{"name", "arguments"}` + `</TOOLCALL>`.
    Nemotron,
    /// Kimi K2: `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>`
    /// calls in a `<|tool_calls_section_begin|>` ... `<|tool_calls_section_end|>` section.
    KimiK2,
    /// DeepSeek V3 and R1: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` + a fenced JSON block +
    /// `<｜tool▁call▁end｜>`, in a `<｜tool▁calls▁begin｜>` ... `<｜tool▁calls▁end｜>` section.
    DeepSeekR1,
    /// DeepSeek V3.1: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` in the same section.
    DeepSeekV31,
    /// gpt-oss (harmony): a `commentary` message to `functions.NAME` whose body is the JSON arguments.
    GptOss,
    /// Anything else: a bare JSON object with `name` and `arguments` (or `parameters`).
    Generic,
}

impl ToolFamily {
    /// Every family, in the order of [`ToolFamily::name`].
    pub const ALL: [ToolFamily; 13] = [
        ToolFamily::Llama3,
        ToolFamily::Hermes,
        ToolFamily::Qwen3Coder,
        ToolFamily::Mistral,
        ToolFamily::MistralArgs,
        ToolFamily::Glm,
        ToolFamily::SeedOss,
        ToolFamily::Nemotron,
        ToolFamily::KimiK2,
        ToolFamily::DeepSeekR1,
        ToolFamily::DeepSeekV31,
        ToolFamily::GptOss,
        ToolFamily::Generic,
    ];

    /// The family's name: `llama3`, `hermes`, `qwen3-coder`, `mistral`, `mistral-args`, `glm`,
    /// `seed-oss`, `nemotron`, `kimi-k2`, `deepseek-r1`, `deepseek-v3.1`, `gpt-oss`, `generic`.
    pub fn name(self) -> &'static str {
        match self {
            ToolFamily::Llama3 => "llama3",
            ToolFamily::Hermes => "hermes",
            ToolFamily::Qwen3Coder => "qwen3-coder",
            ToolFamily::Mistral => "mistral",
            ToolFamily::MistralArgs => "mistral-args",
            ToolFamily::Glm => "glm",
            ToolFamily::SeedOss => "seed-oss",
            ToolFamily::Nemotron => "nemotron",
            ToolFamily::KimiK2 => "kimi-k2",
            ToolFamily::DeepSeekR1 => "deepseek-r1",
            ToolFamily::DeepSeekV31 => "deepseek-v3.1",
            ToolFamily::GptOss => "gpt-oss",
            ToolFamily::Generic => "generic",
        }
    }

    /// The family of a [`ToolFamily::name`].
    pub fn from_name(name: &str) -> Option<ToolFamily> {
        ToolFamily::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The family of a chat template, from the call markers its text contains. The markers of
    /// the families that reuse another's tags (Seed-OSS's XML, GLM's `<tool_call>`) are looked
    /// for first.
    pub fn detect(template: &str) -> ToolFamily {
        if template.contains("<seed:tool_call>") {
            ToolFamily::SeedOss
        } else if template.contains("<arg_key>") && template.contains("<tool_call>") {
            ToolFamily::Glm
        } else if template.contains("<function=") && template.contains("<parameter=") {
            ToolFamily::Qwen3Coder
        } else if template.contains("<tool_call>") {
            ToolFamily::Hermes
        } else if template.contains("[TOOL_CALLS]") {
            if template.contains("[ARGS]") {
                ToolFamily::MistralArgs
            } else {
                ToolFamily::Mistral
            }
        } else if template.contains("<TOOLCALL>") {
            ToolFamily::Nemotron
        } else if template.contains("<|tool_calls_section_begin|>") {
            ToolFamily::KimiK2
        } else if template.contains("<｜tool▁calls▁begin｜>") {
            // R1 and V3 fence the arguments as a JSON block after `function<｜tool▁sep｜>NAME`.
            if template.contains("```json") {
                ToolFamily::DeepSeekR1
            } else {
                ToolFamily::DeepSeekV31
            }
        } else if template.contains("<|channel|>") && template.contains("<|call|>") {
            ToolFamily::GptOss
        } else if template.contains("<|python_tag|>")
            || (template.contains("<|start_header_id|>") && template.contains("\"parameters\""))
        {
            ToolFamily::Llama3
        } else {
            ToolFamily::Generic
        }
    }
}

/// One parsed call, as OpenAI's `tool_calls` entry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedToolCall {
    /// The call's id: the model's own where it wrote one, else made up by the parser.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments: the JSON text of an object.
    pub arguments: String,
}

impl ParsedToolCall {
    /// The call as a history entry ([`super::ToolCall`]), arguments as OpenAI sends them.
    pub fn to_tool_call(&self) -> super::ToolCall {
        super::ToolCall::new(&self.id, &self.name, serde_json::Value::String(self.arguments.clone()))
    }
}

/// A model's output split into text and tool calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedOutput {
    /// The text outside the calls.
    pub content: String,
    /// The complete calls, in order.
    pub calls: Vec<ParsedToolCall>,
    /// The raw text of a call still open when the output ended (not parsed): the generation
    /// was cut short in the middle of a call.
    pub unfinished: Option<String>,
}

impl ParsedOutput {
    /// Add a streamed delta.
    pub fn apply(&mut self, d: ToolDelta) {
        match d {
            ToolDelta::Content(t) => self.content.push_str(&t),
            ToolDelta::CallStart { id, name, .. } => {
                self.calls.push(ParsedToolCall { id, name, arguments: String::new() })
            }
            ToolDelta::Arguments { index, fragment } => {
                if let Some(c) = self.calls.get_mut(index) {
                    c.arguments.push_str(&fragment);
                }
            }
        }
    }
}

/// Parse a whole output of a model of `family`; with `parallel` false only the first call is
/// kept. Call ids are `call_0`, `call_1`, ... (Mistral's nine letters and digits made from
/// those) unless the model wrote its own.
pub fn parse_tool_calls(text: &str, family: ToolFamily, parallel: bool) -> ParsedOutput {
    let mut s = ToolCallStream::new(family).parallel(parallel);
    let mut out = ParsedOutput::default();
    for d in s.push(text) {
        out.apply(d);
    }
    let (rest, unfinished) = s.finish();
    for d in rest {
        out.apply(d);
    }
    out.unfinished = unfinished;
    out
}
