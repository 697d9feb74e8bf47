//! The host's modules import one another one way: no file of `host/src`
//! imports, through any chain of files, a file that imports it; and no
//! top-level module (a folder or a file under `src/`) reaches, through any
//! chain, a top-level module that reaches it: the folders are layers.
//!
//! Read from the source, as a reader would: every path a file names
//! (`crate::a::b`, `super::x`, `self::y`, a child module `z::` it declares),
//! in a `use` or inline, is an arrow to the file that defines that module,
//! its tests and comments left out; a file's arrows to the modules it is
//! part of are not drawn. A circle of files (a strongly connected component of
//! more than one) fails the test, naming its files and the arrows between
//! them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["pipeline", "dlq"]`) and the file that defines it.
type Modules = BTreeMap<Vec<String>, PathBuf>;

fn modules(src: &Path) -> Modules {
    let mut found = Modules::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read host/src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            // Test files, which may reach anywhere.
            if !name.ends_with(".rs") || name == "tests.rs" || name.ends_with("_tests.rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            let last = parts.pop().expect("a file name");
            match last.as_str() {
                "main.rs" if parts.is_empty() => continue,
                "lib.rs" | "mod.rs" => {}
                other => parts.push(other.trim_end_matches(".rs").to_owned()),
            }
            found.insert(parts, path);
        }
    }
    found
}

/// The file's code, without comments, strings and its `#[cfg(test)]` modules.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i32> = None;
    let mut depth = 0;
    let mut pending_test = false;
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("");
        let trimmed = line.trim();
        if trimmed.starts_with("#[cfg(test)]") {
            pending_test = true;
            continue;
        }
        let opens = line.matches('{').count() as i32;
        let closes = line.matches('}').count() as i32;
        if pending_test && skip_depth.is_none() && (trimmed.starts_with("mod ") || trimmed.starts_with("pub mod ")) {
            skip_depth = Some(depth);
        }
        pending_test = false;
        depth += opens - closes;
        if let Some(at) = skip_depth {
            if depth <= at {
                skip_depth = None;
            }
            continue;
        }
        // String literals cannot hold an import.
        let mut kept = String::new();
        let mut in_string = false;
        let mut previous = ' ';
        for c in line.chars() {
            if c == '"' && previous != '\\' {
                in_string = !in_string;
            } else if !in_string {
                kept.push(c);
            }
            previous = c;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Paths of the form `a::b::c` in `code` (the leading segments only:
/// identifiers joined by `::`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let mut segments = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            segments.push(bytes[start..j].iter().collect::<String>());
            if j + 2 < bytes.len() && bytes[j] == ':' && bytes[j + 1] == ':' && ident(bytes[j + 2]) {
                j += 2;
            } else {
                // `a::{b, c}`: each of the braces' first segments too.
                if j + 2 < bytes.len() && bytes[j] == ':' && bytes[j + 1] == ':' && bytes[j + 2] == '{' {
                    let close = bytes[j..].iter().position(|&c| c == '}').map_or(bytes.len(), |p| j + p);
                    let inner: String = bytes[j + 3..close].iter().collect();
                    for item in inner.split(',') {
                        let mut nested = segments.clone();
                        nested.extend(item.trim().split("::").map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()));
                        found.push(nested);
                    }
                }
                break;
            }
        }
        if segments.len() > 1 {
            found.push(segments);
        }
        i = j.max(i + 1);
    }
    found
}

/// The module a file named `path` points to, from `module` (its own).
fn target(modules: &Modules, module: &[String], children: &BTreeSet<String>, path: &[String]) -> Option<Vec<String>> {
    let mut absolute: Vec<String> = match path[0].as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => {
            let mut base = module.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            return longest(modules, &base);
        }
        child if children.contains(child) => {
            let mut base = module.to_vec();
            base.push(child.to_owned());
            base.extend(path[1..].iter().cloned());
            return longest(modules, &base);
        }
        _ => return None,
    };
    absolute.extend(path[1..].iter().cloned());
    longest(modules, &absolute)
}

/// The longest prefix of `path` that is a module with a file.
fn longest(modules: &Modules, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains_key(p))
}

/// Arrows between files: `from` -> `to`, with the paths that make each.
fn arrows(modules: &Modules) -> BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>> {
    let mut arrows = BTreeMap::new();
    for (module, file) in modules {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let code = code(&text);
        let children: BTreeSet<String> = code
            .lines()
            .filter_map(|l| {
                let l = l.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                l.strip_prefix("mod ").map(|rest| rest.trim_end_matches(';').trim().to_owned())
            })
            .collect();
        for path in paths(&code) {
            let Some(to) = target(modules, module, &children, &path) else { continue };
            // A module's own file, and the crate root (it declares every
            // module), draw no arrow; nor does a file's use of the modules
            // it is part of (`super::`): a folder's `mod.rs` is that module's
            // face, its files are its inside (farm-studio draws it so).
            if &to == module || to.is_empty() || module.is_empty() || module.starts_with(&to) {
                continue;
            }
            arrows.entry((module.clone(), to)).or_insert_with(BTreeSet::new).insert(path.join("::"));
        }
    }
    arrows
}

/// The arrows as adjacency lists, for [`circles`].
fn edges(arrows: &BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>>) -> BTreeMap<Vec<String>, Vec<Vec<String>>> {
    let mut edges: BTreeMap<Vec<String>, Vec<Vec<String>>> = BTreeMap::new();
    for (from, to) in arrows.keys() {
        edges.entry(from.clone()).or_default().push(to.clone());
    }
    edges
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(nodes: &[Vec<String>], edges: &BTreeMap<Vec<String>, Vec<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Vec<String>, Vec<Vec<String>>>,
        index: BTreeMap<Vec<String>, usize>,
        low: BTreeMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        on_stack: BTreeSet<Vec<String>>,
        next: usize,
        found: Vec<Vec<Vec<String>>>,
    }
    fn visit(w: &mut Walk<'_>, v: &Vec<String>) {
        w.index.insert(v.clone(), w.next);
        w.low.insert(v.clone(), w.next);
        w.next += 1;
        w.stack.push(v.clone());
        w.on_stack.insert(v.clone());
        for to in w.edges.get(v).cloned().unwrap_or_default() {
            if !w.index.contains_key(&to) {
                visit(w, &to);
                let low = w.low[v].min(w.low[&to]);
                w.low.insert(v.clone(), low);
            } else if w.on_stack.contains(&to) {
                let low = w.low[v].min(w.index[&to]);
                w.low.insert(v.clone(), low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut component = Vec::new();
            while let Some(top) = w.stack.pop() {
                w.on_stack.remove(&top);
                let done = &top == v;
                component.push(top);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                w.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in nodes {
        if !walk.index.contains_key(node) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

#[test]
fn no_file_of_the_host_imports_a_file_that_imports_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let arrows = arrows(&modules);
    let edges = edges(&arrows);
    let nodes: Vec<Vec<String>> = modules.keys().cloned().collect();
    let file = |m: &Vec<String>| modules[m].strip_prefix(&src).expect("under src").display().to_string();
    let mut found = Vec::new();
    for circle in circles(&nodes, &edges) {
        let mut files: Vec<String> = circle.iter().map(file).collect();
        files.sort();
        let mut why = format!("a circle of {} files: {}\n", files.len(), files.join(", "));
        for ((from, to), names) in &arrows {
            if circle.contains(from) && circle.contains(to) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                why.push_str(&format!("  {} -> {}: {}\n", file(from), file(to), names.join(", ")));
            }
        }
        found.push(why);
    }
    assert!(found.is_empty(), "import circles among host/src's files:\n{}", found.join("\n"));
}

/// The arrows between top-level modules: each file arrow drawn between
/// the top-level modules its two files are part of, when they differ.
fn layer_arrows(
    arrows: &BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>>,
) -> BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>> {
    let mut between = BTreeMap::new();
    for ((from, to), names) in arrows {
        let (top_from, top_to) = (vec![from[0].clone()], vec![to[0].clone()]);
        if top_from != top_to {
            let names = names.iter().map(|n| format!("{} names {n}", from.join("::")));
            between.entry((top_from, top_to)).or_insert_with(BTreeSet::new).extend(names);
        }
    }
    between
}

#[test]
fn no_top_level_module_of_the_host_reaches_one_that_reaches_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let arrows = layer_arrows(&arrows(&modules));
    let nodes: BTreeSet<Vec<String>> = modules.keys().filter(|m| !m.is_empty()).map(|m| vec![m[0].clone()]).collect();
    let nodes: Vec<Vec<String>> = nodes.into_iter().collect();
    let mut found = Vec::new();
    for circle in circles(&nodes, &edges(&arrows)) {
        let names: Vec<String> = circle.iter().map(|m| m[0].clone()).collect();
        let mut why = format!("a circle of {} top-level modules: {}\n", names.len(), names.join(", "));
        for ((from, to), names) in &arrows {
            if circle.contains(from) && circle.contains(to) {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                why.push_str(&format!("  {} -> {}: {}\n", from[0], to[0], names.join(", ")));
            }
        }
        found.push(why);
    }
    assert!(found.is_empty(), "host/src's top-level modules are not layers:\n{}", found.join("\n"));
}

#[test]
fn the_reader_finds_a_circle_when_there_is_one() {
    // The test above must be able to fail: two files that name each other.
    let dir = std::env::temp_dir().join(format!("idem-structure-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a")).expect("dir");
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").expect("lib");
    std::fs::write(dir.join("a/mod.rs"), "use crate::b::Thing;\nmod inner;\n").expect("a");
    std::fs::write(dir.join("a/inner.rs"), "use super::super::b;\n").expect("inner");
    std::fs::write(dir.join("b.rs"), "pub struct Thing;\n// crate::a is only named in a comment\n").expect("b");
    let modules = modules(&dir);
    let nodes: Vec<Vec<String>> = modules.keys().cloned().collect();
    assert!(circles(&nodes, &edges(&arrows(&modules))).is_empty(), "a comment draws no arrow");
    std::fs::write(dir.join("b.rs"), "pub struct Thing;\nfn f() { crate::a::inner::g(); }\n").expect("b");
    let found = circles(&nodes, &edges(&arrows(&modules)));
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0], vec![vec!["a".to_owned(), "inner".to_owned()], vec!["b".to_owned()]], "{found:?}");
}

#[test]
fn the_reader_finds_a_circle_between_folders_that_no_two_files_make() {
    // Four files, no circle among them, and yet folder `a` reaches `b` and
    // `b` reaches `a`: the layer test must see it.
    let dir = std::env::temp_dir().join(format!("idem-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a")).expect("dir");
    std::fs::create_dir_all(dir.join("b")).expect("dir");
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").expect("lib");
    std::fs::write(dir.join("a/mod.rs"), "mod top;\nmod low;\n").expect("a");
    std::fs::write(dir.join("a/top.rs"), "use crate::b::low::X;\n").expect("a/top");
    std::fs::write(dir.join("a/low.rs"), "pub struct Y;\n").expect("a/low");
    std::fs::write(dir.join("b/mod.rs"), "pub mod top;\npub mod low;\n").expect("b");
    std::fs::write(dir.join("b/top.rs"), "use crate::a::low::Y;\n").expect("b/top");
    std::fs::write(dir.join("b/low.rs"), "pub struct X;\n").expect("b/low");
    let modules = modules(&dir);
    let nodes: Vec<Vec<String>> = modules.keys().cloned().collect();
    let files = circles(&nodes, &edges(&arrows(&modules)));
    let layers = layer_arrows(&arrows(&modules));
    let tops = vec![vec!["a".to_owned()], vec!["b".to_owned()]];
    let found = circles(&tops, &edges(&layers));
    std::fs::remove_dir_all(&dir).ok();
    assert!(files.is_empty(), "no circle of files: {files:?}");
    assert_eq!(found, vec![tops], "a circle of folders");
}
