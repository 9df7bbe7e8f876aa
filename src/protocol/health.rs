//! The health answers (`/healthz`, `/readyz`): whether the process answers, and whether its
//! database does with the schema this build expects.

use serde::{Deserialize, Serialize};

/// The process answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always "ok".
    #[cfg_attr(feature = "server", schema(example = "ok"))]
    pub status: String,
}

/// Whether the database answers with the schema this build expects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// "ready", "schema not current" or "database unreachable".
    pub status: String,
    /// The newest applied migration (absent when the database is unreachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<i64>,
    /// The newest migration of this build (only when the schema is not current).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<i64>,
}
