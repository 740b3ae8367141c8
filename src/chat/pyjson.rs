//! Python's `json.dumps` over template values, for the `tojson` filter of chat templates.
//!
//! transformers replaces jinja2's `tojson` with `json.dumps(x, ensure_ascii=False, ...)`, whose
//! output differs from minijinja's built-in one (`", "` and `": "` separators, no HTML escaping),
//! and tool-calling templates print it into the prompt, so the bytes matter.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// Nesting deeper than this is refused (template values can be self-made but not cyclic;
/// the cap keeps the stack bounded anyway).
const MAX_DEPTH: usize = 128;

/// The keyword arguments of `json.dumps` that templates use, and a bound on the output.
#[derive(Debug, Clone)]
pub(super) struct Options {
    /// The output may grow to about this many bytes (the render's size budget left): a list
    /// that holds one large value many times would otherwise print it many times over.
    pub max_len: usize,
    /// `indent`, already turned into the string repeated per level.
    pub indent: Option<String>,
    /// `ensure_ascii`: escape everything outside ASCII as `\uXXXX`.
    pub ensure_ascii: bool,
    /// `sort_keys`.
    pub sort_keys: bool,
    /// `separators` (item, key); Python's default depends on `indent`.
    pub separators: Option<(String, String)>,
}

impl Default for Options {
    fn default() -> Options {
        Options { max_len: usize::MAX, indent: None, ensure_ascii: false, sort_keys: false, separators: None }
    }
}

fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("tojson: {}", msg.into()))
}

/// Append the JSON text of `v` at nesting `level` to `out`.
pub(super) fn write(out: &mut String, v: &Value, o: &Options, level: usize) -> Result<(), Error> {
    if level > MAX_DEPTH {
        return Err(err("value nested too deeply"));
    }
    if out.len() > o.max_len {
        return Err(Error::new(
            ErrorKind::SizeBudgetExceeded,
            format!("tojson: the output is longer than the {} bytes left", o.max_len),
        ));
    }
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, v)?,
        ValueKind::String => write_str(out, v.as_str().unwrap_or_default(), o.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            let (item_sep, _) = seps(o);
            write_container(out, '[', ']', items.len(), o, level, item_sep, |out, i| {
                write(out, &items[i], o, level + 1)
            })?;
        }
        ValueKind::Map => {
            let mut pairs = Vec::new();
            for k in v.try_iter()? {
                let val = v.get_item(&k)?;
                pairs.push((key_text(&k)?, val));
            }
            if o.sort_keys {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
            }
            let (item_sep, key_sep) = seps(o);
            write_container(out, '{', '}', pairs.len(), o, level, item_sep, |out, i| {
                write_str(out, &pairs[i].0, o.ensure_ascii);
                out.push_str(key_sep);
                write(out, &pairs[i].1, o, level + 1)
            })?;
        }
        ValueKind::Undefined => return Err(err("Undefined is not JSON serializable")),
        other => return Err(err(format!("a value of kind {other} is not JSON serializable"))),
    }
    Ok(())
}

fn seps(o: &Options) -> (&str, &str) {
    match (&o.separators, &o.indent) {
        (Some((i, k)), _) => (i.as_str(), k.as_str()),
        (None, Some(_)) => (",", ": "),
        (None, None) => (", ", ": "),
    }
}

/// Python's layout: `[` newline+indent item sep newline+indent item newline+outer-indent `]`.
#[allow(clippy::too_many_arguments)]
fn write_container(
    out: &mut String,
    open: char,
    close: char,
    n: usize,
    o: &Options,
    level: usize,
    item_sep: &str,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if n == 0 {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, depth: usize| {
        if let Some(ind) = &o.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    };
    newline(out, level + 1);
    for i in 0..n {
        if i > 0 {
            out.push_str(item_sep);
            newline(out, level + 1);
        }
        item(out, i)?;
    }
    newline(out, level);
    out.push(close);
    Ok(())
}

/// Python turns non-string keys into strings: ints as decimal, bools and None as JSON words.
fn key_text(k: &Value) -> Result<String, Error> {
    match k.kind() {
        ValueKind::String => Ok(k.as_str().unwrap_or_default().to_string()),
        ValueKind::None => Ok("null".into()),
        ValueKind::Bool => Ok(if k.is_true() { "true" } else { "false" }.into()),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, k)?;
            Ok(s)
        }
        other => Err(err(format!("keys must be str, int, float, bool or None, not {other}"))),
    }
}

fn write_number(out: &mut String, v: &Value) -> Result<(), Error> {
    if v.is_integer() {
        out.push_str(&v.to_string());
        return Ok(());
    }
    let f = f64::try_from(v.clone()).map_err(|_| err("number out of range"))?;
    out.push_str(&py_float_repr(f));
    Ok(())
}

/// Python's `float.__repr__` as `json.dumps` writes it (`1.0`, `0.1`, `1e+16`, `NaN`, `Infinity`).
fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Shortest round-trip digits from Rust's `{:e}`, laid out with Python's rule: scientific
    // when the decimal exponent is < -4 or >= 16.
    let sci = format!("{f:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    }
}

fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::py_float_repr;

    #[test]
    fn floats_like_python() {
        assert_eq!(py_float_repr(1.0), "1.0");
        assert_eq!(py_float_repr(0.1), "0.1");
        assert_eq!(py_float_repr(-2.5), "-2.5");
        assert_eq!(py_float_repr(1e16), "1e+16");
        assert_eq!(py_float_repr(1.5e-5), "1.5e-05");
        assert_eq!(py_float_repr(123456789.0), "123456789.0");
    }
}
