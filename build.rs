//! Embeds the SQL: `refinery::embed_migrations!` reads sql/migrations at compile time, and this
//! script lists sql/api/*.sql and sql/api/templates/*.sql (sorted by name) into
//! `$OUT_DIR/sql_api.rs` as `include_str!`s, so adding a file needs no Rust change. Cargo is told
//! to rebuild when either folder changes.
//!
//! The templates are embedded with their fragments expanded: a `{{> name}}` in a template is
//! replaced by sql/api/templates/fragments/<name>.sql (its leading `--` comment lines, which
//! describe it, left out), so a part that several templates share is written once. A fragment
//! may take arguments, `{{> name a = value; b = value}}`, which replace `{{$a}}` and `{{$b}}` in
//! its text; a line `--! a = value; ...` among its leading comments gives defaults (which may
//! use the other arguments). A fragment included on a line that ends in a variant marker
//! (`--@claim`, `--@hold`: see asyncflow.render_template) has every line marked. A fragment may
//! include others. The other
//! placeholders (`{{tasks}}`, ...) are left to asyncflow.render_template.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn sql_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    files
}

fn list(out: &mut String, name: &str, files: &[(String, PathBuf)]) {
    let _ = writeln!(out, "pub const {name}: &[(&str, &str)] = &[");
    for (stem, f) in files {
        let _ = writeln!(out, "    ({stem:?}, include_str!({:?})),", f.display().to_string());
    }
    let _ = writeln!(out, "];");
}

fn stem(f: &Path) -> String {
    f.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string()
}

/// `a = x; b = y` as pairs (values trimmed; a value may hold anything but `;`).
fn parse_args(text: &str, what: &str) -> BTreeMap<String, String> {
    let mut args = BTreeMap::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or_else(|| panic!("{what}: `{part}` is not name = value"));
        args.insert(k.trim().to_string(), v.trim().to_string());
    }
    args
}

struct Fragment {
    defaults: BTreeMap<String, String>,
    body: String,
}

fn read_fragment(path: &Path) -> Fragment {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut defaults = BTreeMap::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.peek() {
        if let Some(d) = line.strip_prefix("--!") {
            defaults = parse_args(d, &path.display().to_string());
        } else if !line.starts_with("--") {
            break;
        }
        lines.next();
    }
    let body: Vec<&str> = lines.collect();
    let body = body.join("\n").trim_end().to_string();
    if body.lines().last().is_some_and(|l| l.contains("--")) {
        panic!("{}: a fragment's last line must not end in a comment", path.display());
    }
    Fragment { defaults, body }
}

/// `fragment` with its arguments put in: given ones first, then defaults (which may use them).
fn instantiate(name: &str, f: &Fragment, given: &BTreeMap<String, String>) -> String {
    let mut args = given.clone();
    for _ in 0..4 {
        for (k, v) in &f.defaults {
            if !given.contains_key(k) {
                let mut v = v.clone();
                for (ak, av) in &args {
                    v = v.replace(&format!("{{{{${ak}}}}}"), av);
                }
                args.insert(k.clone(), v);
            }
        }
    }
    let mut body = f.body.clone();
    for (k, v) in &args {
        body = body.replace(&format!("{{{{${k}}}}}"), v);
    }
    if let Some(at) = body.find("{{$") {
        panic!(
            "fragment {name}: argument {} not given",
            &body[at..body[at..].find("}}").map_or(body.len(), |e| at + e + 2)]
        );
    }
    body
}

/// A template's text with its `{{> name ...}}` directives expanded (a fragment may include
/// others, `depth` deep so far).
fn expand(template: &str, fragments: &BTreeMap<String, Fragment>, what: &str, depth: usize) -> String {
    let mut out = String::with_capacity(template.len() * 2);
    for line in template.split_inclusive('\n') {
        if !line.contains("{{>") {
            out.push_str(line);
            continue;
        }
        let (content, newline) = match line.strip_suffix('\n') {
            Some(c) => (c, "\n"),
            None => (line, ""),
        };
        let trimmed = content.trim_end();
        let marker = ["--@claim", "--@hold"].into_iter().find(|m| trimmed.ends_with(m));
        let mut rest = content;
        let mut expanded = String::new();
        while let Some(start) = rest.find("{{>") {
            expanded.push_str(&rest[..start]);
            let end = rest[start..].find("}}").unwrap_or_else(|| panic!("{what}: unclosed {{{{> in `{line}`"));
            let inner = rest[start + 3..start + end].trim();
            let (name, args) = inner.split_once(char::is_whitespace).unwrap_or((inner, ""));
            let fragment = fragments.get(name).unwrap_or_else(|| panic!("{what}: no fragment {name}"));
            let text = instantiate(name, fragment, &parse_args(args, what));
            if depth >= 4 {
                panic!("{what}: fragments nested more than 4 deep at {name}");
            }
            expanded.push_str(&expand(&text, fragments, what, depth + 1));
            rest = &rest[start + end + 2..];
        }
        expanded.push_str(rest);
        match marker {
            Some(m) => {
                let lines: Vec<&str> = expanded.lines().collect();
                let n = lines.len();
                for (i, l) in lines.into_iter().enumerate() {
                    out.push_str(l);
                    // the include's own line keeps its marker once, at its end
                    if i + 1 < n {
                        out.push_str(" ");
                        out.push_str(m);
                    }
                    out.push('\n');
                }
                if newline.is_empty() {
                    out.pop();
                }
            }
            None => {
                out.push_str(&expanded);
                out.push_str(newline);
            }
        }
    }
    out
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let api = root.join("sql/api");
    let templates = api.join("templates");
    let fragment_dir = templates.join("fragments");
    println!("cargo:rerun-if-changed=sql/migrations");
    println!("cargo:rerun-if-changed=sql/api");
    println!("cargo:rerun-if-changed=sql/api/templates");
    println!("cargo:rerun-if-changed=sql/api/templates/fragments");
    let fragments: BTreeMap<String, Fragment> = if fragment_dir.is_dir() {
        sql_files(&fragment_dir).iter().map(|f| (stem(f), read_fragment(f))).collect()
    } else {
        BTreeMap::new()
    };
    let expanded_dir = out_dir.join("templates");
    std::fs::create_dir_all(&expanded_dir).unwrap_or_else(|e| panic!("{}: {e}", expanded_dir.display()));
    let mut expanded = Vec::new();
    for f in sql_files(&templates) {
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let dest = expanded_dir.join(f.file_name().expect("a file name"));
        std::fs::write(&dest, expand(&text, &fragments, &f.display().to_string(), 0))
            .unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
        expanded.push((stem(&f), dest));
    }
    let mut out = String::new();
    let api_files: Vec<(String, PathBuf)> = sql_files(&api).into_iter().map(|f| (stem(&f), f)).collect();
    list(&mut out, "FILES", &api_files);
    list(&mut out, "TEMPLATES", &expanded);
    let dest = out_dir.join("sql_api.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("{}: {e}", dest.display()));
}
