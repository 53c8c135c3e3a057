//! No module imports a module that imports it back: the planner's (and the executor's) modules
//! form a DAG. Each file's `use` declarations and inline `crate::` / `super::` paths (outside its
//! test module) are resolved to the module that *defines* the item, following `pub use`
//! re-exports (so a facade like `plan.rs` re-exporting `types::*` is not a dependency on the
//! facade), and the resulting graph must have no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_string()),
    }
    parts
}

/// The file's text without its `#[cfg(test)]` modules and comments.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i32> = None;
    let mut pending_cfg_test = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if let Some(d) = skip_depth.as_mut() {
            *d += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if *d <= 0 {
                skip_depth = None;
            }
            continue;
        }
        if t.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        if pending_cfg_test && t.starts_with("mod ") && t.ends_with('{') {
            skip_depth = Some(1);
            pending_cfg_test = false;
            continue;
        }
        pending_cfg_test = false;
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e` (`self` keeps the prefix).
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let base = join(prefix, head);
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&base, &inner[start..], out);
    } else if !tree.is_empty() {
        let tree = tree.split(" as ").next().unwrap().trim();
        if tree == "self" {
            out.push(prefix.to_string());
        } else {
            out.push(join(prefix, tree));
        }
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}::{b}"),
    }
}

/// (`pub use`?, path) of every `use` declaration, and every inline `crate::`/`super::` path.
fn paths(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = &rest[..i];
        let is_decl = before.is_empty() || before.ends_with(['\n', ' ', '\t']);
        let line_start = before.rfind('\n').map_or(0, |n| n + 1);
        let lead = before[line_start..].trim();
        let public = lead.starts_with("pub");
        let after = &rest[i + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if is_decl && (lead.is_empty() || lead.starts_with("pub")) {
            let mut v = Vec::new();
            expand(
                "",
                &after[..end].split_whitespace().collect::<String>(),
                &mut v,
            );
            out.extend(v.into_iter().map(|p| (public, p)));
        }
        rest = &after[end.min(after.len())..];
    }
    for key in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(key) {
            let s = from + i;
            let prev = code[..s].chars().last().unwrap_or(' ');
            let tail: String = code[s..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            // `crate::a::{b, c}` is a `use` group, already expanded above.
            let group = code[s + tail.len()..].starts_with('{');
            if !(prev.is_alphanumeric() || prev == '_' || prev == ':' || group) {
                out.push((false, tail.trim_end_matches(':').to_string()));
            }
            from = s + key.len();
        }
    }
    out
}

/// `path` (as written in `module`) as absolute segments.
fn absolute(module: &Module, is_mod_rs: bool, path: &str) -> Option<Vec<String>> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut abs: Vec<String> = Vec::new();
    let mut it = segs.iter().peekable();
    match it.peek().copied() {
        Some(&"crate") => {
            it.next();
        }
        Some(&"super") | Some(&"self") => {
            // A file `a/b.rs` is module a::b; `super` is a. `self` is the module itself.
            abs = module.clone();
            while let Some(&&s) = it.peek() {
                match s {
                    "super" => {
                        abs.pop()?;
                        it.next();
                    }
                    "self" => {
                        it.next();
                    }
                    _ => break,
                }
            }
            let _ = is_mod_rs;
        }
        _ => return None, // an external crate or a local item
    }
    abs.extend(it.map(|s| s.to_string()));
    Some(abs)
}

struct Crate {
    modules: BTreeSet<Module>,
    /// (module, name) → absolute path it re-exports; (module, "*") → glob sources.
    reexports: BTreeMap<(Module, String), Vec<Vec<String>>>,
}

impl Crate {
    /// The module that defines the item at `path` (absolute segments).
    fn definer(&self, path: &[String], depth: u32) -> Module {
        let mut m: Module = Vec::new();
        let mut i = 0;
        while i < path.len() {
            let mut next = m.clone();
            next.push(path[i].clone());
            if self.modules.contains(&next) {
                m = next;
                i += 1;
            } else {
                break;
            }
        }
        if i == path.len() || depth > 8 {
            return m;
        }
        let name = &path[i];
        if let Some(targets) = self.reexports.get(&(m.clone(), name.clone())) {
            return self.definer(&targets[0], depth + 1);
        }
        if let Some(globs) = self.reexports.get(&(m.clone(), "*".to_string())) {
            for g in globs {
                let mut p = g.clone();
                p.push(name.clone());
                let d = self.definer(&p, depth + 1);
                if d != m && d.len() >= g.len() {
                    return d;
                }
            }
        }
        m
    }
}

fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut fs = Vec::new();
    files(src, &mut fs);
    let mut parsed = Vec::new();
    let mut modules = BTreeSet::new();
    for f in &fs {
        let m = module_of(src, f);
        let is_mod = f
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        modules.insert(m.clone());
        let text = code(&std::fs::read_to_string(f).unwrap());
        parsed.push((m, is_mod, paths(&text)));
    }
    let mut reexports: BTreeMap<(Module, String), Vec<Vec<String>>> = BTreeMap::new();
    for (m, is_mod, ps) in &parsed {
        for (public, p) in ps.iter().filter(|(public, _)| *public) {
            let _ = public;
            // `pub use x::Y` inside a module resolves relative to it (2018 paths: a bare first
            // segment names a child module).
            let path = if p.starts_with("crate::")
                || p.starts_with("super::")
                || p.starts_with("self::")
            {
                absolute(m, *is_mod, p)
            } else {
                let mut child = m.clone();
                child.push(p.split("::").next().unwrap().to_string());
                if modules.contains(&child) {
                    absolute(m, *is_mod, &format!("self::{p}"))
                } else {
                    None
                }
            };
            if let Some(abs) = path {
                let name = abs.last().unwrap().clone();
                let key = if name == "*" {
                    (m.clone(), "*".to_string())
                } else {
                    (m.clone(), name)
                };
                let target = if key.1 == "*" {
                    abs[..abs.len() - 1].to_vec()
                } else {
                    abs
                };
                reexports.entry(key).or_default().push(target);
            }
        }
    }
    let krate = Crate { modules, reexports };
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, is_mod, ps) in &parsed {
        let e = edges.entry(m.clone()).or_default();
        for (_, p) in ps {
            let bare_child = {
                let mut child = m.clone();
                child.push(p.split("::").next().unwrap().to_string());
                krate.modules.contains(&child)
            };
            let abs = if bare_child {
                absolute(m, *is_mod, &format!("self::{p}"))
            } else {
                absolute(m, *is_mod, p)
            };
            let Some(abs) = abs else { continue };
            let abs: Vec<String> = abs.into_iter().filter(|s| s != "*").collect();
            let d = krate.definer(&abs, 0);
            // The crate root only declares and re-exports; items it defines are none.
            if &d != m && !d.is_empty() {
                e.insert(d);
            }
        }
    }
    edges
}

fn find_cycle(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        n: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        state: &mut BTreeMap<Module, u8>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let i = stack.iter().position(|x| x == m).unwrap();
                    let mut c = stack[i..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, edges, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

fn check(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let edges = graph(&src);
    assert!(edges.len() > 5, "{crate_dir}: read {} modules", edges.len());
    if let Some(c) = find_cycle(&edges) {
        let names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
        panic!("{crate_dir}: module cycle {}", names.join(" -> "));
    }
}

#[test]
fn planner_modules_form_a_dag() {
    check("planner");
}

#[test]
fn vocab_modules_form_a_dag() {
    check("vocab");
}

#[test]
fn exec_modules_form_a_dag() {
    check("exec");
}

/// The checker sees a cycle when there is one (and resolves re-exports to their definer).
#[test]
fn the_checker_finds_a_planted_cycle() {
    let dir = std::env::temp_dir().join(format!("kvplan-modgraph-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    let w = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    w(
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\npub mod d;\npub mod e;\npub mod f;\n",
    );
    w(
        "a/mod.rs",
        "mod types;\npub use types::*;\nuse crate::b::run;\n",
    );
    w("a/types.rs", "pub struct T;\n");
    w("b.rs", "use crate::a::T;\npub fn run() {}\n");
    w("c.rs", "pub fn x() { crate::d::y() }\n");
    w("d.rs", "pub fn y() { crate::c::x() }\n");
    w("e.rs", "");
    w("f.rs", "");
    let edges = graph(&src);
    // b uses a's re-export of types::T: an edge to a::types, not to a (no a <-> b cycle).
    assert!(edges[&vec!["b".to_string()]].contains(&vec!["a".to_string(), "types".to_string()]));
    let cycle = find_cycle(&edges).expect("c <-> d");
    assert!(
        cycle.iter().any(|m| m == &vec!["c".to_string()]),
        "{cycle:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
