//! llama.cpp's GBNF grammars, translated into llguidance's Lark dialect (llguidance converts
//! GBNF only in its Python package).
//!
//! GBNF (`grammars/README.md` in llama.cpp): rules `name ::= alternatives`; string literals
//! `"..."` and character classes `[...]` / `[^...]` (with `\n \r \t \\ \" \[ \] \xHH \uHHHH
//! \UHHHHHHHH` escapes) match code points; `.` any code point; `( )` groups; `* + ?` and
//! `{m}`, `{m,}`, `{m,n}`, `{,n}` repetitions; `<[id]>` / `<text>` a token, `!<[id]>` any token
//! but one; `#` comments. A rule ends at a newline, except inside parentheses and after `|`.
//! `root` is the start.
//!
//! The translation keeps the grammar character-level: each literal becomes one Lark string
//! and each class one single-character regex, repetitions stay grammar rules, so llguidance's
//! Earley parser (with its dynamic lexer) accepts exactly GBNF's language.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::{Error, Result};

/// Most nesting of parentheses (a guard against hostile input: the parser recurses).
const MAX_DEPTH: usize = 64;
/// Largest repetition bound accepted (llama.cpp's grammars use small ones).
const MAX_REPEAT: u32 = 10_000;

#[derive(Debug, Clone, PartialEq)]
enum Item {
    /// A string literal (possibly empty).
    Literal(String),
    /// A character class: ranges, negated or not.
    Class { negated: bool, ranges: Vec<(char, char)> },
    /// Any code point.
    Any,
    /// A rule by (GBNF) name.
    Rule(String),
    /// A token by id, or any token but one.
    TokenId { id: u32, negated: bool },
    /// A token by its text.
    TokenText(String),
    /// A parenthesised group of alternatives.
    Group(Vec<Vec<Term>>),
}

#[derive(Debug, Clone, PartialEq)]
struct Term {
    item: Item,
    /// (min, max) repetitions; max `None`: unbounded.
    repeat: (u32, Option<u32>),
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    at: usize,
}

fn err(msg: impl Into<String>) -> Error {
    Error::Grammar(format!("GBNF: {}", msg.into()))
}

impl<'a> Parser<'a> {
    fn line(&self) -> usize {
        self.text[..self.at.min(self.text.len())].matches('\n').count() + 1
    }
    fn fail<T>(&self, msg: &str) -> Result<T> {
        Err(err(format!("{msg} (line {})", self.line())))
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }
    /// Skip spaces, tabs and comments; newlines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' => self.at += 1,
                b'#' => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.at += 1;
                    }
                }
                b'\r' | b'\n' if newlines => self.at += 1,
                _ => break,
            }
        }
    }
    fn name(&mut self) -> Option<String> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_') {
            self.at += 1;
        }
        (self.at > start).then(|| self.text[start..self.at].to_string())
    }
    fn number(&mut self) -> Result<u32> {
        let start = self.at;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        match self.text[start..self.at].parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(n),
            Ok(_) => self.fail(&format!("a repetition bound above {MAX_REPEAT}")),
            Err(_) => self.fail("expected a number"),
        }
    }
    /// One (possibly escaped) code point of a literal or class.
    fn char(&mut self) -> Result<char> {
        let rest = &self.text[self.at..];
        let mut it = rest.chars();
        let Some(c) = it.next() else { return self.fail("unexpected end of the grammar") };
        if c != '\\' {
            self.at += c.len_utf8();
            return Ok(c);
        }
        let Some(e) = it.next() else { return self.fail("a backslash at the end") };
        self.at += 2;
        let hex = |p: &mut Parser, n: usize| -> Result<char> {
            let digits = p.text.get(p.at..p.at + n).filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()));
            let Some(d) = digits else { return p.fail(&format!("\\{e} needs {n} hex digits")) };
            p.at += n;
            char::from_u32(u32::from_str_radix(d, 16).unwrap_or(u32::MAX))
                .map_or_else(|| p.fail("an escape that is not a code point"), Ok)
        };
        match e {
            'n' => Ok('\n'),
            'r' => Ok('\r'),
            't' => Ok('\t'),
            'x' => hex(self, 2),
            'u' => hex(self, 4),
            'U' => hex(self, 8),
            '\\' | '"' | '[' | ']' | '-' | '^' => Ok(e),
            _ => self.fail(&format!("unknown escape \\{e}")),
        }
    }

    fn alternatives(&mut self, nested: bool, depth: usize) -> Result<Vec<Vec<Term>>> {
        let mut alts = vec![self.sequence(nested, depth)?];
        while self.peek() == Some(b'|') {
            self.at += 1;
            self.space(true);
            alts.push(self.sequence(nested, depth)?);
        }
        Ok(alts)
    }

    fn sequence(&mut self, nested: bool, depth: usize) -> Result<Vec<Term>> {
        let mut seq: Vec<Term> = Vec::new();
        loop {
            self.space(nested);
            let item = match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    let mut s = String::new();
                    while self.peek() != Some(b'"') {
                        if self.peek().is_none() || self.peek() == Some(b'\n') {
                            return self.fail("an unterminated string");
                        }
                        s.push(self.char()?);
                    }
                    self.at += 1;
                    Item::Literal(s)
                }
                Some(b'[') => {
                    self.at += 1;
                    let negated = self.peek() == Some(b'^');
                    if negated {
                        self.at += 1;
                    }
                    let mut ranges = Vec::new();
                    while self.peek() != Some(b']') {
                        if self.peek().is_none() {
                            return self.fail("an unterminated character class");
                        }
                        let lo = self.char()?;
                        let hi = if self.peek() == Some(b'-') && self.s.get(self.at + 1) != Some(&b']') {
                            self.at += 1;
                            self.char()?
                        } else {
                            lo
                        };
                        if hi < lo {
                            return self.fail(&format!("an empty range {lo:?}-{hi:?}"));
                        }
                        ranges.push((lo, hi));
                    }
                    self.at += 1;
                    Item::Class { negated, ranges }
                }
                Some(b'.') => {
                    self.at += 1;
                    Item::Any
                }
                Some(b'(') => {
                    if depth >= MAX_DEPTH {
                        return self.fail(&format!("parentheses nested deeper than {MAX_DEPTH}"));
                    }
                    self.at += 1;
                    self.space(true);
                    let alts = self.alternatives(true, depth + 1)?;
                    self.space(true);
                    if self.peek() != Some(b')') {
                        return self.fail("expected ')'");
                    }
                    self.at += 1;
                    Item::Group(alts)
                }
                Some(b'!') | Some(b'<') => {
                    let negated = self.peek() == Some(b'!');
                    if negated {
                        self.at += 1;
                    }
                    if self.peek() != Some(b'<') {
                        return self.fail("expected '<' after '!'");
                    }
                    let end = self.text[self.at..].find('>').map(|e| self.at + e);
                    let Some(end) = end else { return self.fail("an unterminated token '<...'") };
                    let inner = &self.text[self.at + 1..end];
                    self.at = end + 1;
                    if let Some(id) = inner.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
                        let Ok(id) = id.trim().parse::<u32>() else {
                            return self.fail(&format!("a token id '{id}' that is not a number"));
                        };
                        Item::TokenId { id, negated }
                    } else if negated {
                        return self
                            .fail("'!<text>' (any token but one named by text): name it by id, '!<[id]>'");
                    } else if inner.is_empty() || inner.contains(char::is_whitespace) {
                        return self.fail(&format!("a token '<{inner}>' with no text or with spaces"));
                    } else {
                        Item::TokenText(inner.to_string())
                    }
                }
                Some(c) if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' => {
                    let name = self.name().unwrap_or_default();
                    // `name ::=` starts the next rule.
                    let save = self.at;
                    self.space(false);
                    if self.text[self.at..].starts_with("::=") {
                        if nested {
                            return self.fail(&format!("rule '{name}' starts inside parentheses"));
                        }
                        self.at = save - name.len();
                        return Ok(seq);
                    }
                    self.at = save;
                    Item::Rule(name)
                }
                _ => return Ok(seq),
            };
            let repeat = self.repeat()?;
            seq.push(Term { item, repeat });
        }
    }

    fn repeat(&mut self) -> Result<(u32, Option<u32>)> {
        let r = match self.peek() {
            Some(b'*') => (0, None),
            Some(b'+') => (1, None),
            Some(b'?') => (0, Some(1)),
            Some(b'{') => {
                self.at += 1;
                self.space(false);
                let min = if self.peek() == Some(b',') { 0 } else { self.number()? };
                self.space(false);
                let max = if self.peek() == Some(b',') {
                    self.at += 1;
                    self.space(false);
                    if self.peek() == Some(b'}') {
                        None
                    } else {
                        Some(self.number()?)
                    }
                } else {
                    Some(min)
                };
                self.space(false);
                if self.peek() != Some(b'}') {
                    return self.fail("expected '}'");
                }
                if max.is_some_and(|m| m < min) {
                    return self.fail(&format!(
                        "a repetition {{{min},{}}} whose maximum is below its minimum",
                        max.unwrap_or(0)
                    ));
                }
                self.at += 1;
                return Ok((min, max));
            }
            _ => return Ok((1, Some(1))),
        };
        self.at += 1;
        Ok(r)
    }
}

/// The rules of a GBNF grammar, by name, in order of definition.
fn parse(text: &str) -> Result<Vec<(String, Vec<Vec<Term>>)>> {
    let mut p = Parser { s: text.as_bytes(), text, at: 0 };
    let mut rules: Vec<(String, Vec<Vec<Term>>)> = Vec::new();
    loop {
        p.space(true);
        if p.peek().is_none() {
            break;
        }
        let Some(name) = p.name() else { return p.fail("expected a rule name") };
        p.space(false);
        if !p.text[p.at..].starts_with("::=") {
            return p.fail(&format!("expected '::=' after '{name}'"));
        }
        p.at += 3;
        p.space(true);
        let alts = p.alternatives(false, 0)?;
        p.space(false);
        if let Some(c) = p.peek().filter(|&c| c != b'\n' && c != b'\r') {
            return p.fail(&format!("unexpected '{}'", c as char));
        }
        match rules.iter_mut().find(|(n, _)| *n == name) {
            // llama.cpp lets a later definition add alternatives to a rule.
            Some(r) => r.1.extend(alts),
            None => rules.push((name, alts)),
        }
    }
    Ok(rules)
}

/// A Lark rule name for GBNF name `n` (Lark rules are lowercase; `-` is allowed).
fn lark_name(n: &str) -> String {
    format!("g_{}", n.to_ascii_lowercase())
}

/// A code point inside a regex class.
fn class_char(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        out.push(c);
    } else {
        let _ = write!(out, "\\x{{{:x}}}", c as u32);
    }
}

fn emit_alts(out: &mut String, alts: &[Vec<Term>]) {
    for (i, seq) in alts.iter().enumerate() {
        if i > 0 {
            out.push_str(" | ");
        }
        emit_seq(out, seq);
    }
}

fn emit_seq(out: &mut String, seq: &[Term]) {
    let terms: Vec<&Term> = seq.iter().filter(|t| t.repeat != (0, Some(0))).collect();
    if terms.is_empty() {
        out.push_str("\"\"");
        return;
    }
    for (i, t) in terms.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match &t.item {
            Item::Literal(s) => out.push_str(&serde_json::to_string(s).unwrap_or_default()),
            Item::Class { negated, ranges } => {
                out.push_str("/[");
                if *negated {
                    out.push('^');
                }
                for &(lo, hi) in ranges {
                    class_char(out, lo);
                    if hi != lo {
                        out.push('-');
                        class_char(out, hi);
                    }
                }
                out.push_str("]/");
            }
            Item::Any => out.push_str("/(?s:.)/"),
            Item::Rule(n) => out.push_str(&lark_name(n)),
            Item::TokenId { id, negated } => {
                let _ = write!(out, "<[{}{id}]>", if *negated { "^" } else { "" });
            }
            Item::TokenText(s) => {
                let _ = write!(out, "<{s}>");
            }
            Item::Group(alts) => {
                out.push('(');
                emit_alts(out, alts);
                out.push(')');
            }
        }
        match t.repeat {
            (1, Some(1)) => {}
            (0, None) => out.push('*'),
            (1, None) => out.push('+'),
            (0, Some(1)) => out.push('?'),
            (m, None) => {
                let _ = write!(out, "{{{m},}}");
            }
            (m, Some(n)) if m == n => {
                let _ = write!(out, "{{{m}}}");
            }
            (m, Some(n)) => {
                let _ = write!(out, "{{{m},{n}}}");
            }
        }
    }
}

/// The Lark grammar (llguidance's dialect) of GBNF grammar `text`: a clear error for syntax
/// errors, an undefined rule, or a missing `root`.
pub fn gbnf_to_lark(text: &str) -> Result<String> {
    let rules = parse(text)?;
    if !rules.iter().any(|(n, _)| n == "root") {
        return Err(err("no 'root' rule"));
    }
    // Names must stay distinct after lowercasing; every referenced rule must exist.
    let mut names: BTreeMap<String, &str> = BTreeMap::new();
    for (n, _) in &rules {
        if let Some(other) = names.insert(lark_name(n), n) {
            return Err(err(format!("rules '{other}' and '{n}' differ only in case")));
        }
    }
    fn check(alts: &[Vec<Term>], known: &BTreeMap<String, &str>, rule: &str) -> Result<()> {
        for t in alts.iter().flatten() {
            match &t.item {
                Item::Rule(n) if !known.contains_key(&lark_name(n)) => {
                    return Err(err(format!("rule '{rule}' uses '{n}', which is not defined")));
                }
                Item::Group(a) => check(a, known, rule)?,
                _ => {}
            }
        }
        Ok(())
    }
    let mut out = String::from("start: g_root\n");
    for (n, alts) in &rules {
        check(alts, &names, n)?;
        out.push_str(&lark_name(n));
        out.push_str(": ");
        emit_alts(&mut out, alts);
        out.push('\n');
    }
    Ok(out)
}

/// Whether grammar text looks like GBNF (`name ::= ...` rules) rather than Lark (`name: ...`).
pub fn looks_like_gbnf(text: &str) -> bool {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .find(|l| !l.is_empty() && !l.starts_with("//"))
        .is_some_and(|l| l.contains("::="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_each_construct() {
        let g = r#"
# a comment
root ::= "a\n\"" [a-z0-9_] [^\]x] . item* item+ item? item{2} item{2,} item{1,3} item{,4} ( "x" | "y"
    | "z" ) <[12]> !<[13]> <think> ""
item ::= "i" |
  "j"   # continues after |
"#;
        let lark = gbnf_to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: g_root\n\
             g_root: \"a\\n\\\"\" /[a-z0-9\\x{5f}]/ /[^\\x{5d}x]/ /(?s:.)/ g_item* g_item+ g_item? g_item{2} \
             g_item{2,} g_item{1,3} g_item{0,4} (\"x\" | \"y\" | \"z\") <[12]> <[^13]> <think> \"\"\n\
             g_item: \"i\" | \"j\"\n"
        );
    }

    #[test]
    fn escapes_and_unicode() {
        let lark = gbnf_to_lark("root ::= \"\\x41\\u00e9\\U0001F600\" [ぁ-ゟ]").unwrap();
        assert_eq!(lark, "start: g_root\ng_root: \"Aé😀\" /[\\x{3041}-\\x{309f}]/\n");
    }

    #[test]
    fn errors_name_the_problem() {
        let cases = [
            ("item ::= \"a\"", "no 'root'"),
            ("root ::= item", "not defined"),
            ("root ::= \"abc", "unterminated string"),
            ("root ::= [a-", "end of the grammar"),
            ("root ::= [ab", "unterminated character class"),
            ("root ::= (\"a\"", "expected ')'"),
            ("root ::= \"a\"{3,1}", "below its minimum"),
            ("root ::= \"a\"{99999}", "bound above"),
            ("root = \"a\"", "expected '::='"),
            ("root ::= !<think>", "by id"),
            ("root ::= \"\\q\"", "unknown escape"),
            ("root ::= [z-a]", "empty range"),
        ];
        for (g, want) in cases {
            let e = gbnf_to_lark(g).unwrap_err().to_string();
            assert!(e.contains(want), "{g:?}: {e}");
        }
        let deep = format!("root ::= {}\"a\"{}", "(".repeat(100), ")".repeat(100));
        assert!(gbnf_to_lark(&deep).unwrap_err().to_string().contains("nested deeper"));
    }

    #[test]
    fn tells_gbnf_from_lark() {
        assert!(looks_like_gbnf("# c\nroot ::= \"a\""));
        assert!(!looks_like_gbnf("start: \"a\"\n"));
        assert!(!looks_like_gbnf("// x ::= y\nstart: x"));
    }

    /// llama.cpp's example grammars (tests/data/gbnf) translate, and llguidance accepts the result.
    #[test]
    fn example_grammars_translate() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gbnf");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).expect("tests/data/gbnf") {
            let path = e.unwrap().path();
            if path.extension().and_then(|x| x.to_str()) != Some("gbnf") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let lark = gbnf_to_lark(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(lark.starts_with("start: g_root\n"), "{}", path.display());
            n += 1;
        }
        assert!(n >= 5, "only {n} example grammars");
    }
}
