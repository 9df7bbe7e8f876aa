//! Pipeline definition files: `pipelines/<name>.json` or `.toml`, one pipeline each. The name
//! is the document's `name`, else the file's stem. Validation is the database's
//! (`asyncflow.compile_pipeline`), so a file, an HTTP call and a SQL call are judged alike.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// The largest definition file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A pipeline read from a file: its name and definition.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineFile {
    /// Pipeline name.
    pub name: String,
    /// The definition as JSON.
    pub definition: Value,
}

/// Reads a JSON or TOML pipeline file.
pub fn read(path: &Path) -> Result<PipelineFile> {
    let shown = path.display();
    let size = std::fs::metadata(path).map_err(|e| Error::Config(format!("{shown}: {e}")))?.len();
    if size > MAX_FILE_BYTES {
        return Err(Error::Config(format!(
            "{shown}: {size} bytes, more than the {MAX_FILE_BYTES} a definition may have"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::Config(format!("{shown}: {e}")))?;
    let definition = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => parse_json(&text).map_err(|e| Error::InvalidPipeline(format!("{shown}: {e}")))?,
        Some("toml") => parse_toml(&text).map_err(|e| Error::InvalidPipeline(format!("{shown}: {e}")))?,
        _ => return Err(Error::Config(format!("{shown}: a pipeline file ends in .json or .toml"))),
    };
    let name = match definition.get("name") {
        Some(Value::String(n)) => n.clone(),
        Some(other) => return Err(Error::InvalidPipeline(format!("{shown}: name must be a string, got {other}"))),
        None => path
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or_else(|| Error::Config(format!("{shown}: no file name")))?
            .to_string(),
    };
    Ok(PipelineFile { name, definition })
}

fn parse_json(text: &str) -> std::result::Result<Value, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

fn parse_toml(text: &str) -> std::result::Result<Value, String> {
    let value: toml::Value = toml::from_str(text).map_err(|e| e.to_string())?;
    serde_json::to_value(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_give_the_same_definition() {
        let toml = r#"
            timeout = 60
            edges = [["start", "end"]]
            [[nodes]]
            name = "start"
            type = "start"
            [[nodes]]
            name = "end"
            type = "end"
        "#;
        let json = r#"{"timeout": 60, "edges": [["start", "end"]],
            "nodes": [{"name": "start", "type": "start"}, {"name": "end", "type": "end"}]}"#;
        assert_eq!(parse_toml(toml), parse_json(json));
    }

    #[test]
    fn unreadable_files_are_errors_not_panics() {
        let dir = std::env::temp_dir().join(format!("af-def-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let bad = dir.join("p.json");
        std::fs::write(&bad, "{nope").expect("write");
        assert!(matches!(read(&bad), Err(Error::InvalidPipeline(m)) if m.contains("p.json")));
        let other = dir.join("p.yaml");
        std::fs::write(&other, "a: 1").expect("write");
        assert!(matches!(read(&other), Err(Error::Config(_))));
        assert!(matches!(read(&dir.join("missing.json")), Err(Error::Config(_))));
        let named = dir.join("file.json");
        std::fs::write(&named, r#"{"name": "inner", "nodes": [], "edges": []}"#).expect("write");
        assert_eq!(read(&named).expect("reads").name, "inner");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
