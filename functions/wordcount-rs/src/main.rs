//! The wordcount function: one stage. Reads the stage call on stdin, counts the words, lines and
//! characters of `context.text` (or of the file at `context.path`), and writes the reply on
//! stdout: `{"result": {"words", "lines", "chars", "top": [[word, count], ...]}}`.
//! It depends on serde alone: a function needs the JSON contract, not the runner.

use std::collections::HashMap;
use std::io::Read;

use serde::Deserialize;
use serde_json::{json, Value};

/// The fields of the stage call this function uses (the call has more; see functions/README.md).
#[derive(Debug, Deserialize)]
struct StageCall {
    context: Value,
}

/// The reply forms this function uses.
enum StageReply {
    Succeeded { result: Value },
    Failed { error: String, retry: bool },
}

impl StageReply {
    fn fail(error: String) -> Self {
        StageReply::Failed { error, retry: true }
    }

    fn to_json(&self) -> Value {
        match self {
            StageReply::Succeeded { result } => json!({"result": result}),
            StageReply::Failed { error, retry } => json!({"error": error, "retry": retry}),
        }
    }
}

fn count(call: &StageCall) -> StageReply {
    let text = match (call.context.get("text"), call.context.get("path")) {
        (Some(Value::String(t)), _) => t.clone(),
        (_, Some(Value::String(p))) => match std::fs::read_to_string(p) {
            Ok(t) => t,
            Err(e) => return StageReply::Failed { error: format!("reading {p}: {e}"), retry: false },
        },
        _ => return StageReply::Failed { error: "context needs \"text\" or \"path\"".into(), retry: false },
    };
    let mut counts: HashMap<String, u64> = HashMap::new();
    for word in text.split(|c: char| !c.is_alphanumeric() && c != '\'').filter(|w| !w.is_empty()) {
        *counts.entry(word.to_lowercase()).or_default() += 1;
    }
    let mut top: Vec<(String, u64)> = counts.iter().map(|(w, n)| (w.clone(), *n)).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(5);
    StageReply::Succeeded {
        result: json!({
            "words": counts.values().sum::<u64>(),
            "lines": text.lines().count(),
            "chars": text.chars().count(),
            "top": top,
        }),
    }
}

fn main() {
    let mut input = String::new();
    let reply = match std::io::stdin().read_to_string(&mut input) {
        Err(e) => StageReply::fail(format!("reading stdin: {e}")),
        Ok(_) => match serde_json::from_str::<StageCall>(&input) {
            Ok(call) => count(&call),
            Err(e) => StageReply::Failed { error: format!("not a stage call: {e}"), retry: false },
        },
    };
    println!("{}", reply.to_json());
}
