//! Newtypes for identifiers: [`TypeName`] (the only way to name a task type, checked against the
//! pattern that makes it safe as part of a partition name), [`TaskId`] (opaque to clients, but it
//! names its type and shard, so a lookup never scans) and [`WorkerId`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Longest task type name: `tasks_<type>_<shard>` must stay within PostgreSQL's 63-byte names.
pub const TYPE_NAME_MAX_LEN: usize = 40;

/// A task type name matching `^[a-z][a-z0-9_]{0,39}$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct TypeName(String);

impl TypeName {
    /// Checks `name` against the type name pattern.
    pub fn new(name: &str) -> Result<Self, Error> {
        let mut chars = name.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if first_ok && rest_ok && name.len() <= TYPE_NAME_MAX_LEN {
            Ok(TypeName(name.to_string()))
        } else {
            Err(Error::InvalidTypeName(format!(
                "invalid task type name {}: it must match ^[a-z][a-z0-9_]{{0,39}}$",
                crate::error::echo(name)
            )))
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TypeName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        TypeName::new(s)
    }
}

impl<'de> Deserialize<'de> for TypeName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TypeName::new(&s).map_err(serde::de::Error::custom)
    }
}

/// A task id, `<type>-<shard>-<n>`. Clients treat it as an opaque, URL-safe string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    /// Parses and checks a task id.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = || Error::UnknownTask(format!("unknown task {}: not a task id", crate::error::echo(text)));
        let mut parts = text.split('-');
        let (Some(ty), Some(shard), Some(n), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        TypeName::new(ty).map_err(|_| bad())?;
        let number = |s: &str, max_len: usize| {
            !s.is_empty() && s.len() <= max_len && !s.starts_with('0') && s.chars().all(|c| c.is_ascii_digit())
        };
        if number(shard, 9) && number(n, 18) {
            Ok(TaskId(text.to_string()))
        } else {
            Err(bad())
        }
    }

    /// The task's type.
    pub fn task_type(&self) -> &str {
        self.0.split('-').next().unwrap_or_default()
    }

    /// The shard that holds the task.
    pub fn shard(&self) -> i32 {
        self.0.split('-').nth(1).and_then(|s| s.parse().ok()).unwrap_or_default()
    }

    /// The id as text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The task's number within its type.
    pub fn number(&self) -> i64 {
        self.0.split('-').nth(2).and_then(|s| s.parse().ok()).unwrap_or_default()
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for TaskId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TaskId::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// This machine's host name (`/etc/hostname`), or `host` when it cannot be read.
pub fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_string())
}

/// Names one worker process: `<host>-<pid>-<random>` unless given.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkerId(String);

impl WorkerId {
    /// A fresh id for this process.
    pub fn generate() -> Self {
        let host = host_name();
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        WorkerId(format!("{host}-{}-{}", std::process::id(), &suffix[..8]))
    }

    /// A given id, 1 to 200 characters.
    pub fn new(id: &str) -> Result<Self, Error> {
        if id.is_empty() || id.len() > 200 {
            return Err(Error::InvalidArgument("worker id must be 1 to 200 characters".into()));
        }
        Ok(WorkerId(id.to_string()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_follow_the_partition_safe_pattern() {
        for ok in ["a", "video", "v2_transcode", &"a".repeat(40)] {
            assert!(TypeName::new(ok).is_ok(), "{ok}");
        }
        for bad in ["", "A", "1a", "_a", "a-b", "a b", "a;drop", "é", &"a".repeat(41)] {
            assert!(TypeName::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn task_ids_name_their_type_and_shard() {
        let id = TaskId::parse("video_hd-3-1234").unwrap();
        assert_eq!(id.task_type(), "video_hd");
        assert_eq!(id.shard(), 3);
        for bad in ["", "video", "video-1", "video-0-1", "video-1-01", "Video-1-1", "video-1-1-1", "video-x-1"] {
            assert!(TaskId::parse(bad).is_err(), "{bad}");
        }
    }
}
