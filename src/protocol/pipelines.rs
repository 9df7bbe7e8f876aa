//! The pipelines resource (`/v1/pipelines`): a pipeline version is the JSON document the SQL API
//! builds (`asyncflow.get_pipeline`, `put_pipeline`), which travels as it is; what is its own here
//! is the query of a read or an apply.

use serde::{Deserialize, Serialize};

/// `?version=N` on a pipeline read, `?status=draft|active` on an apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct PipelineQuery {
    /// A version (read: default the active one, else the latest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<i32>,
    /// Apply as `active` (default) or `draft`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}
