//! `asyncflow pipeline ...`: apply, list, show, activate or retire workflow pipelines, on the
//! database directly or on an `asyncflow serve` with `--server URL` (same operations, same JSON).
//! Output is JSON on stdout: `apply` prints a line per file (name, version, status, whether it
//! was stored, node count), `--full` the stored versions with their definitions and plans.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::{json, Value};

use super::print;
use crate::client::Client;
use crate::error::Result;

/// `pipeline` subcommands.
#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Validate pipeline files (JSON or TOML) and store each as a new version (unchanged files
    /// keep their version); active unless --draft.
    Apply {
        /// Pipeline files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Store as drafts: runs keep using the active versions.
        #[arg(long)]
        draft: bool,
        /// Print each stored version whole (definition and plan), not its summary.
        #[arg(long)]
        full: bool,
    },
    /// List pipelines and their versions.
    List,
    /// Show a pipeline version with its definition and execution plan.
    Get {
        /// Pipeline name.
        name: String,
        /// Version (default: the active one, else the latest).
        #[arg(long)]
        version: Option<i32>,
    },
    /// Make a version the active one (the active one is retired; started runs keep theirs).
    Activate {
        /// Pipeline name.
        name: String,
        /// Version.
        version: i32,
    },
    /// Retire a version: it starts no new runs.
    Retire {
        /// Pipeline name.
        name: String,
        /// Version.
        version: i32,
    },
}

/// Runs a `pipeline` command and prints its answer.
pub async fn pipeline(client: &Client, command: PipelineCommand) -> Result<()> {
    match command {
        PipelineCommand::Apply { files, draft, full } => {
            let status = if draft { "draft" } else { "active" };
            let mut applied = Vec::with_capacity(files.len());
            for file in files {
                let p = crate::workflow::definition::read(&file)?;
                applied.push(client.put_pipeline(&p.name, &p.definition, status).await?);
            }
            if full {
                return print(&applied);
            }
            print(&applied.iter().map(applied_summary).collect::<Vec<_>>())
        }
        PipelineCommand::List => print(&client.list_pipelines().await?),
        PipelineCommand::Get { name, version } => print(&client.get_pipeline(&name, version).await?),
        PipelineCommand::Activate { name, version } => print(&client.activate_pipeline(&name, version).await?),
        PipelineCommand::Retire { name, version } => print(&client.retire_pipeline(&name, version).await?),
    }
}

/// What `pipeline apply` prints of a stored version: its name, version, status, whether this
/// apply stored it (`created`) and how many nodes its definition has.
fn applied_summary(version: &Value) -> Value {
    json!({
        "name": version["name"],
        "version": version["version"],
        "status": version["status"],
        "created": version["created"],
        "nodes": version["definition"]["nodes"].as_array().map_or(0, Vec::len),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_applied_version_is_summed_up_in_one_line() {
        let stored = json!({"name": "p", "version": 3, "status": "active", "created": true,
            "definition": {"nodes": [{"name": "start"}, {"name": "a"}, {"name": "end"}], "edges": []},
            "plan": {"nodes": {}}, "created_at": "2030-01-01T00:00:00Z"});
        assert_eq!(
            applied_summary(&stored),
            json!({"name": "p", "version": 3, "status": "active", "created": true, "nodes": 3})
        );
    }
}
