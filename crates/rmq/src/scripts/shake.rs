//! Puts before a script only the shared helpers it can reach.
//!
//! Redis runs a script's text as the body of one function, so every
//! `local function` of the includes is built again on each call: a new
//! closure, each of its upvalues looked up in a list as long as the locals
//! above it, and garbage to collect afterwards. With every include whole, a
//! take built ~100 closures per call and spent a tenth of its instructions
//! there (BENCHMARKS.md, "Where a call's instructions go"), most of them
//! for helpers of other scripts. So the includes are cut into their
//! top-level statements, and a statement is kept when it defines a name
//! that the script's own text, or a statement kept before, uses.
//!
//! The cut is by layout, which the includes keep: a top-level statement
//! starts at column 0 (`local ...`, `for ...`), its body is indented, and
//! its closing `end` or `}` sits at column 0. A statement that defines no
//! name (a `for` that sets locals, say) is always kept. Kept statements
//! stay in their order, so a helper still sees only what was above it.

use std::collections::HashSet;

/// One top-level statement of an include, with the comments above it.
pub(super) struct Statement<'a> {
    pub(super) text: &'a str,
    /// The names it declares (none for a `for` or an assignment).
    pub(super) defines: Vec<String>,
    uses: HashSet<String>,
}

impl Statement<'_> {
    /// Whether it is a `local function`: it only defines a helper.
    pub(super) fn is_function(&self) -> bool {
        first_code_line(self.text).is_some_and(|l| l.starts_with("local function "))
    }

    /// The statement as an assignment to names declared elsewhere (a
    /// `local` dropped; `local A` becomes `A = nil`); other statements as
    /// they are.
    pub(super) fn as_assignment(&self) -> String {
        let mut at = 0;
        let mut code_line = None;
        for line in self.text.split_inclusive('\n') {
            if !line.starts_with("--") && !line.trim().is_empty() {
                code_line = Some(line.trim_end_matches('\n'));
                break;
            }
            at += line.len();
        }
        let Some(line) = code_line else {
            return self.text.to_string();
        };
        let Some(rest) = line.strip_prefix("local ") else {
            return self.text.to_string();
        };
        let head = &self.text[..at];
        let tail = &self.text[at + line.len()..];
        if rest.contains('=') {
            format!("{head}{rest}{tail}")
        } else {
            let nils = vec!["nil"; self.defines.len()].join(", ");
            format!("{head}{rest} = {nils}{tail}")
        }
    }
}

/// The first line of a statement that is not a comment or blank.
fn first_code_line(text: &str) -> Option<&str> {
    text.lines()
        .find(|l| !l.starts_with("--") && !l.trim().is_empty())
}

/// The includes' statements that `rest` (the script's own text) reaches,
/// in their order, as one text.
pub(super) fn reachable(includes: &[&str], rest: &str) -> String {
    let statements: Vec<Statement> = includes.iter().flat_map(|src| statements(src)).collect();
    let mut wanted = words(rest);
    let mut kept = vec![false; statements.len()];
    loop {
        let mut grew = false;
        for (i, st) in statements.iter().enumerate() {
            let needed = st.defines.is_empty() || st.defines.iter().any(|n| wanted.contains(n));
            if needed && !kept[i] {
                kept[i] = true;
                wanted.extend(st.uses.iter().cloned());
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    statements
        .iter()
        .zip(kept)
        .filter(|(_, k)| *k)
        .map(|(st, _)| st.text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a line opens a top-level statement (a comment, a blank line or a
/// closing `end`/`}`/`)` does not).
fn opens_statement(line: &str) -> bool {
    let Some(first) = line.chars().next() else {
        return false;
    };
    !first.is_whitespace()
        && !line.starts_with("--")
        && !["end", "}", ")"].iter().any(|c| line.starts_with(c))
}

/// `src` cut into its top-level statements; the comments and blank lines
/// above a statement go with it.
pub(super) fn statements(src: &str) -> Vec<Statement<'_>> {
    let mut starts: Vec<usize> = Vec::new();
    let mut comment_start: Option<usize> = None;
    let mut offset = 0;
    for line in src.split_inclusive('\n') {
        let bare = line.trim_end();
        if opens_statement(bare) {
            starts.push(comment_start.take().unwrap_or(offset));
        } else if bare.starts_with("--") || bare.is_empty() {
            comment_start.get_or_insert(offset);
        } else {
            comment_start = None;
        }
        offset += line.len();
    }
    let mut out = Vec::new();
    // What precedes the first statement is the file's header: comments only.
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(src.len());
        let text = src[start..end].trim_end_matches('\n');
        out.push(Statement {
            text,
            defines: defines(text),
            uses: words(text),
        });
    }
    out
}

/// The names a statement declares: `local function NAME` or
/// `local A, B = ...`.
fn defines(text: &str) -> Vec<String> {
    let Some(line) = first_code_line(text) else {
        return Vec::new();
    };
    if let Some(rest) = line.strip_prefix("local function ") {
        return vec![ident_prefix(rest)];
    }
    let Some(rest) = line.strip_prefix("local ") else {
        return Vec::new();
    };
    let names = rest.split('=').next().unwrap_or("");
    names
        .split(',')
        .map(|n| ident_prefix(n.trim()))
        .filter(|n| !n.is_empty())
        .collect()
}

/// The identifier `s` starts with.
fn ident_prefix(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The identifiers of Lua code, outside comments and string literals.
pub(super) fn words(code: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut chars = code.chars().peekable();
    let mut word = String::new();
    while let Some(c) = chars.next() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            out.insert(std::mem::take(&mut word));
        }
        match c {
            '-' if chars.peek() == Some(&'-') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '\'' | '"' => {
                while let Some(s) = chars.next() {
                    match s {
                        '\\' => {
                            chars.next();
                        }
                        s if s == c || s == '\n' => break,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if !word.is_empty() {
        out.insert(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELPERS: &str = "\
-- a header

local A = 1
local B, C = 2, 3

-- used by f
local function g(x)
  return x + B
end

local function f()
  return g(1)
end

local function unused()
  return C -- not f
end
local T = {
  x = 1,
}
for i = 1, 2 do
  A = A + i
end
";

    #[test]
    fn a_script_gets_what_it_calls_and_what_that_calls_in_order() {
        let text = reachable(&[HELPERS], "return f()");
        assert!(text.contains("local function f()"), "{text}");
        assert!(text.contains("-- used by f\nlocal function g(x)"), "{text}");
        assert!(text.contains("local B, C = 2, 3"), "{text}");
        // The loop defines nothing: kept, and with it the A it sets.
        assert!(text.contains("for i = 1, 2 do"), "{text}");
        assert!(text.contains("local A = 1"), "{text}");
        assert!(text.find("local function g").unwrap() < text.find("local function f").unwrap());
        assert!(!text.contains("unused"), "{text}");
        assert!(!text.contains("local T"), "{text}");
    }

    #[test]
    fn names_in_comments_and_strings_reach_nothing() {
        let text = reachable(&[HELPERS], "-- unused()\nreturn 'T'");
        assert!(!text.contains("unused"), "{text}");
        assert!(!text.contains("local T"), "{text}");
    }

    #[test]
    fn state_becomes_an_assignment_and_a_function_stays_a_function() {
        let st = statements(HELPERS);
        let text_of = |start: &str| st.iter().find(|s| s.text.contains(start)).unwrap();
        assert_eq!(text_of("local B").as_assignment(), "B, C = 2, 3");
        assert_eq!(text_of("local T").as_assignment(), "T = {\n  x = 1,\n}");
        assert!(text_of("local function g").is_function());
        assert!(!text_of("local A").is_function());
        let for_loop = text_of("for i");
        assert_eq!(for_loop.as_assignment(), for_loop.text);
        let bare = statements("-- c\nlocal IDX, MARKS\n");
        assert_eq!(bare[0].as_assignment(), "-- c\nIDX, MARKS = nil, nil");
    }

    #[test]
    fn a_statement_declaring_several_names_is_kept_for_any_of_them() {
        assert_eq!(defines("local B, C = 2, 3"), ["B", "C"]);
        assert_eq!(defines("-- c\nlocal IDX\n"), ["IDX"]);
        assert_eq!(defines("local function f_1(x)\nend"), ["f_1"]);
        assert!(defines("for i = 1, 2 do\nend").is_empty());
    }
}
