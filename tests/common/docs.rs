//! Pages of docs/ run as written: their fenced blocks, the files they name, their shell lines
//! with `asyncflow` meaning this build's binary.

use std::path::Path;
use std::process::{Command, Stdio};

/// The fenced blocks of a Markdown page: (language, text).
pub fn blocks(page: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some((_, text)), None) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The one block of `lang` that contains `needle`.
pub fn block<'a>(all: &'a [(String, String)], lang: &str, needle: &str) -> &'a str {
    let found: Vec<&str> =
        all.iter().filter(|(l, t)| l == lang && t.contains(needle)).map(|(_, t)| t.as_str()).collect();
    assert_eq!(found.len(), 1, "one {lang} block with {needle:?} in the page");
    found[0]
}

/// The path a block names in its first line (`# myfunctions/thumbnail/run`).
pub fn named_path(text: &str) -> &str {
    let line = text.lines().find(|l| l.contains("# myfunctions/")).expect("the block names its file");
    line.trim().trim_start_matches('#').trim()
}

/// `sh -c` in `dir`, with `asyncflow` the binary under test on the database at `url`.
pub fn sh(dir: &Path, url: &str, script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("asyncflow() {{ exec \"$AF_BIN\" \"$@\"; }}\n{script}"))
        .current_dir(dir)
        .env("AF_BIN", env!("CARGO_BIN_EXE_asyncflow"))
        .env("DATABASE_URL", url)
        .env_remove("ASYNCFLOW_SERVER")
        .env_remove("ASYNCFLOW_TOKEN")
        .stdin(Stdio::null());
    cmd
}

/// A page's blocks and a fresh folder to run it in, with the checkout's `functions/` beside its
/// files (the pages copy `functions/sdk/...` from a checkout).
pub fn open_page(page: &str) -> (Vec<(String, String)>, std::path::PathBuf) {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("docs").join(page)).unwrap();
    let dir = std::env::temp_dir().join(format!("af-docs-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(root.join("functions"), dir.join("functions")).unwrap();
    (blocks(&text), dir)
}

/// Writes the block of each (language, needle) to the file it names, under `dir`.
pub fn write_named(all: &[(String, String)], dir: &Path, which: &[(&str, &str)]) {
    for (lang, needle) in which {
        let text = block(all, lang, needle);
        let path = dir.join(named_path(text));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
}
