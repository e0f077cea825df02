//! The same scripts as a Redis Function library, for a locked-down mode:
//! an admin loads the library once (`FUNCTION LOAD`, it is replicated and
//! persisted with the data), and tenants get `FCALL` only, never `EVAL`,
//! `EVALSHA` or `SCRIPT`: they cannot run Lua of their own.
//!
//! Each script body becomes the callback of one function whose parameters
//! are named `KEYS` and `ARGV`, so the bodies run unchanged; its `#!lua`
//! flags become the function's flags. Library and function names carry a
//! hash of the code, so two rmq versions can be loaded side by side.

use std::sync::OnceLock;

use super::ScriptId;

/// The built library: its name, its source and each script's function name.
pub(crate) struct Library {
    pub(crate) name: String,
    pub(crate) code: String,
    names: Vec<(ScriptId, String)>,
}

impl Library {
    /// The function that runs `id`.
    pub(crate) fn function(&self, id: ScriptId) -> &str {
        self.names
            .iter()
            .find(|(i, _)| *i == id)
            .map_or("", |(_, n)| n.as_str())
    }
}

/// The library, built on first use.
pub(crate) fn library() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| {
        let helpers = hoisted_helpers();
        let mut body_parts = Vec::new();
        for id in ScriptId::ALL {
            let (flags, _) = id.source();
            let flags: Vec<String> = flags
                .split_whitespace()
                .find_map(|w| w.strip_prefix("flags="))
                .map(|f| f.split(',').map(|x| format!("'{x}'")).collect())
                .unwrap_or_default();
            body_parts.push((id, flags, super::main_text(id)));
        }
        // Flags too: a library that differs only in a flag is another one.
        let all: String = std::iter::once(helpers.clone())
            .chain(
                body_parts
                    .iter()
                    .map(|(_, flags, code)| format!("{}\n{code}", flags.join(","))),
            )
            .collect();
        let hash = redis::Script::new(&all).get_hash()[..10].to_string();
        let name = format!("rmq_{hash}");
        let mut code = format!("#!lua name={name}\n{helpers}\n");
        let mut names = Vec::new();
        for (id, flags, body) in body_parts {
            let fname = format!("{name}_{}", id.name());
            code.push_str(&format!(
                "redis.register_function{{function_name='{fname}', flags={{{}}}, callback=function(KEYS, ARGV)\nrmq_begin(KEYS, ARGV)\n{body}\nend}}\n",
                flags.join(",")
            ));
            names.push((id, fname));
        }
        Library { name, code, names }
    })
}

/// Every include's helpers, built once when the library loads, and
/// `rmq_begin`, which each function calls first to set what the includes
/// keep per call (`KEYS`, `ARGV`, the slot's keys, the clock, the caches):
/// an `EVALSHA` script builds all of it on every call, closures included.
/// The per-call state is declared where the include declares it (a helper
/// sees what it saw) and set in `rmq_begin`, so no call sees another's.
fn hoisted_helpers() -> String {
    let mut helpers = String::from("local KEYS, ARGV\n");
    let mut per_call = Vec::new();
    for (_, src) in super::INCLUDES {
        for st in super::shake::statements(src) {
            if st.is_function() {
                helpers.push_str(st.text);
                helpers.push('\n');
                continue;
            }
            if !st.defines.is_empty() {
                helpers.push_str(&format!("local {}\n", st.defines.join(", ")));
            }
            per_call.push(st.as_assignment());
        }
    }
    format!(
        "{helpers}\nlocal function rmq_begin(keys, argv)\nKEYS, ARGV = keys, argv\n{}\nend\n",
        per_call.join("\n")
    )
}

/// Rewrites an `EVALSHA <sha> <numkeys> ...` call of `id` as `FCALL`.
pub(crate) fn as_fcall(id: ScriptId, evalsha: &redis::Cmd) -> redis::Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(library().function(id));
    for arg in evalsha.args_iter().skip(2) {
        if let redis::Arg::Simple(bytes) = arg {
            cmd.arg(bytes);
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_a_function_with_its_flags() {
        let lib = library();
        assert!(lib.code.starts_with(&format!("#!lua name={}\n", lib.name)));
        for id in ScriptId::ALL {
            let f = lib.function(id);
            assert!(f.starts_with(&lib.name), "{id:?}");
            assert!(lib.code.contains(&format!("function_name='{f}'")), "{id:?}");
        }
        assert!(lib.code.contains(&format!(
            "function_name='{}', flags={{'allow-oom'}}",
            lib.function(ScriptId::Pop)
        )));
        assert!(lib.code.contains(&format!(
            "function_name='{}', flags={{}}",
            lib.function(ScriptId::Send)
        )));
        assert!(lib.code.contains(&format!(
            "function_name='{}', flags={{'allow-oom','allow-cross-slot-keys'}}",
            lib.function(ScriptId::Renew)
        )));
    }

    #[test]
    fn no_two_includes_define_one_name() {
        // The library puts every include at one level: a name defined twice
        // would reach a script that never named the later include.
        let mut seen = std::collections::HashMap::new();
        for (inc, src) in crate::scripts::INCLUDES {
            for st in crate::scripts::shake::statements(src) {
                for name in st.defines {
                    if let Some(first) = seen.insert(name.clone(), inc) {
                        panic!("{name} is defined by {first}.lua and {inc}.lua");
                    }
                }
            }
        }
    }

    #[test]
    fn helpers_are_built_once_and_state_is_set_per_call() {
        let lib = library();
        let callback = lib.code.find("redis.register_function").unwrap();
        let (top, functions) = lib.code.split_at(callback);
        assert!(top.contains("local function take_slot("));
        assert!(!functions.contains("local function take_slot("));
        // Declared at the top, set in rmq_begin.
        assert!(top.contains("\nlocal NOW_MS\n"));
        assert!(top.contains("\nNOW_MS = nil\n"));
        assert!(top.contains("\nlocal HEADS_READ, HEAD_SCORES\n"));
        assert!(top.contains("\nHEADS_READ, HEAD_SCORES = {}, {}\n"));
        assert_eq!(
            functions.matches("rmq_begin(KEYS, ARGV)").count(),
            ScriptId::ALL.len()
        );
    }

    #[test]
    fn an_evalsha_call_becomes_the_same_fcall() {
        let call = super::super::call(ScriptId::Stats, &["k1".into()], &[b"a", b"b"]);
        let f = as_fcall(ScriptId::Stats, &call);
        let args: Vec<Vec<u8>> = crate::scripts::sent_args(&f);
        assert_eq!(args[0], b"FCALL");
        assert_eq!(args[1], library().function(ScriptId::Stats).as_bytes());
        assert_eq!(
            &args[2..],
            [b"1".to_vec(), b"k1".to_vec(), b"a".to_vec(), b"b".to_vec()]
        );
    }
}
