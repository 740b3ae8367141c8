//! The template step that turns a WGSL family file into one kernel variant.
//!
//! A source names what varies in two ways, and nothing else in it is touched:
//! - `{{NAME}}`: replaced by the text given for `NAME` (a function name, a row count, lines
//!   written out per row);
//! - `// #if NAME`, `// #else`, `// #endif` on lines of their own: the lines between are kept
//!   or dropped by the flag given for `NAME` (blocks nest).
//!
//! Every placeholder and flag the source uses must be given, and everything given must be
//! used: a misspelt name is an error rather than a kernel that silently kept the text (what
//! string replacement allowed).

use std::collections::HashSet;

/// A WGSL source and the values of its placeholders and flags.
pub struct Template<'a> {
    src: &'a str,
    values: Vec<(&'a str, String)>,
    flags: Vec<(&'a str, bool)>,
}

impl<'a> Template<'a> {
    /// A template over `src`, with nothing given yet.
    pub fn new(src: &'a str) -> Self {
        Template { src, values: Vec::new(), flags: Vec::new() }
    }

    /// Give placeholder `{{name}}` the text `value`.
    pub fn set(mut self, name: &'a str, value: impl Into<String>) -> Self {
        self.values.push((name, value.into()));
        self
    }

    /// Give `// #if name` blocks the flag `on`.
    pub fn flag(mut self, name: &'a str, on: bool) -> Self {
        self.flags.push((name, on));
        self
    }

    /// The composed source, or what is wrong: a placeholder or flag the source uses but was
    /// not given, one given but not used, a block not closed, an `#else` or `#endif` alone.
    pub fn render(&self) -> Result<String, String> {
        let mut used: HashSet<&str> = HashSet::new();
        let mut out = String::with_capacity(self.src.len() + 1024);
        // One entry per open block: (its flag's value, inside its `#else` part).
        let mut open: Vec<(bool, bool)> = Vec::new();
        let keeping = |open: &[(bool, bool)]| open.iter().all(|&(on, els)| on != els);
        for (n, line) in self.src.split_inclusive('\n').enumerate() {
            let directive = line.trim().strip_prefix("// #").map(str::trim);
            match directive.map(|d| d.split_once(' ').unwrap_or((d, ""))) {
                Some(("if", name)) => {
                    let name = name.trim();
                    let &(_, on) = self
                        .flags
                        .iter()
                        .find(|(f, _)| *f == name)
                        .ok_or_else(|| format!("line {}: flag '{name}' was not given", n + 1))?;
                    used.insert(name);
                    open.push((on, false));
                }
                Some(("else", _)) => match open.last_mut() {
                    Some(b) if !b.1 => b.1 = true,
                    _ => return Err(format!("line {}: #else outside an #if block", n + 1)),
                },
                Some(("endif", _)) => {
                    open.pop().ok_or_else(|| format!("line {}: #endif without #if", n + 1))?;
                }
                _ if keeping(&open) => self.substitute(line, n + 1, &mut used, &mut out)?,
                _ => {}
            }
        }
        if !open.is_empty() {
            return Err(format!("{} #if block(s) not closed", open.len()));
        }
        let given = self.values.iter().map(|v| v.0).chain(self.flags.iter().map(|f| f.0));
        if let Some(unused) = given.into_iter().find(|name| !used.contains(name)) {
            return Err(format!("'{unused}' was given but the source does not use it"));
        }
        Ok(out)
    }

    /// Append `line` with its placeholders replaced, noting the names used.
    fn substitute(
        &self,
        line: &str,
        n: usize,
        used: &mut HashSet<&'a str>,
        out: &mut String,
    ) -> Result<(), String> {
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or_else(|| format!("line {n}: '{{{{' without '}}}}'"))?;
            let name = &after[..end];
            let (key, value) = self
                .values
                .iter()
                .find(|(k, _)| *k == name)
                .ok_or_else(|| format!("line {n}: placeholder '{name}' was not given"))?;
            used.insert(key);
            out.push_str(value);
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(())
    }
}

/// `n` lines made by `f(0)`, `f(1)`, ..., joined for a placeholder indented by four spaces
/// (the loops over a workgroup's rows are written out: constant register indices, no arrays).
pub fn lines(n: usize, f: impl Fn(usize) -> String) -> String {
    (0..n).map(f).collect::<Vec<_>>().join("\n    ")
}

/// WGSL functions reading the weights `w` (and `wh`) rewritten to read `w2` (`wh2`) for
/// `suffix` "2": every function gets a `_2` suffix, module constants are dropped (the first
/// copy has them). A rename of whole identifiers, not a text replacement: `w` inside `wh`
/// or a member `.w` is left alone.
pub fn suffixed(src: &str, suffix: &str) -> String {
    let body: String = src.lines().filter(|l| !l.starts_with("const ")).map(|l| format!("{l}\n")).collect();
    let mut fns = HashSet::new();
    for piece in body.split("fn ").skip(1) {
        let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        fns.insert(name);
    }
    let mut out = String::with_capacity(body.len() + 1024);
    let mut ident = String::new();
    let mut prev = ' ';
    let flush = |ident: &mut String, out: &mut String, member: bool| {
        if !ident.is_empty() {
            out.push_str(ident);
            if !member {
                if fns.contains(ident.as_str()) {
                    out.push('_');
                    out.push_str(suffix);
                } else if ident == "w" || ident == "wh" {
                    out.push_str(suffix);
                }
            }
            ident.clear();
        }
    };
    let mut member = false;
    for c in body.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            if ident.is_empty() {
                member = prev == '.' || c.is_ascii_digit();
            }
            ident.push(c);
        } else {
            flush(&mut ident, &mut out, member);
            out.push(c);
        }
        prev = c;
    }
    flush(&mut ident, &mut out, member);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_replaced() {
        let t = Template::new("let a = {{X}} + {{Y}};\nfn {{X}}_f() {}\n").set("X", "one").set("Y", "2u");
        assert_eq!(t.render().unwrap(), "let a = one + 2u;\nfn one_f() {}\n");
    }

    #[test]
    fn missing_placeholder_is_an_error() {
        let e = Template::new("a\nlet a = {{X}};\n").render().unwrap_err();
        assert!(e.contains("line 2") && e.contains("'X'"), "{e}");
        assert!(Template::new("let a = {{X;\n").set("X", "1").render().is_err());
    }

    #[test]
    fn unknown_placeholder_is_an_error() {
        let e = Template::new("let a = 1;\n").set("X", "1").render().unwrap_err();
        assert!(e.contains("'X'"), "{e}");
        // A value used only inside a dropped block counts as unused.
        let t = Template::new("// #if A\n{{X}}\n// #endif\n").flag("A", false).set("X", "1");
        assert!(t.render().is_err());
        assert!(Template::new("a\n").flag("A", true).render().is_err());
    }

    #[test]
    fn blocks_keep_or_drop_lines() {
        let src = "a\n// #if A\nb\n  // #if B\nc\n  // #else\nd\n  // #endif\n// #else\ne\n// #endif\nf\n";
        let r = |a, b| Template::new(src).flag("A", a).flag("B", b).render();
        assert_eq!(r(true, true).unwrap(), "a\nb\nc\nf\n");
        assert_eq!(r(true, false).unwrap(), "a\nb\nd\nf\n");
        // B's value does not matter inside a dropped block, but it must still be given.
        assert_eq!(r(false, true).unwrap(), "a\ne\nf\n");
        assert_eq!(r(false, false).unwrap(), "a\ne\nf\n");
        assert!(Template::new(src).flag("A", false).render().is_err());
    }

    #[test]
    fn unbalanced_blocks_are_errors() {
        assert!(Template::new("// #if A\na\n").flag("A", true).render().is_err());
        assert!(Template::new("a\n// #endif\n").render().is_err());
        assert!(Template::new("// #else\n").render().is_err());
        assert!(Template::new("// #if A\n// #else\n// #else\n// #endif\n").flag("A", true).render().is_err());
    }

    #[test]
    fn suffixed_renames_functions_and_weights() {
        let src = "const K: u32 = 1u;\nfn f(o: u32) -> u32 {\n    return w[o].w + wh[o] + g(o);\n}\nfn g(o: u32) -> u32 { return o; }\n";
        let copy = suffixed(src, "2");
        assert_eq!(
            copy,
            "fn f_2(o: u32) -> u32 {\n    return w2[o].w + wh2[o] + g_2(o);\n}\nfn g_2(o: u32) -> u32 { return o; }\n"
        );
    }
}
