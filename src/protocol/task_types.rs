//! The task types resource (`/v1/task-types`): its settings, limits and queues are the types of
//! [`crate::task_type`] and [`crate::task`]; what is its own here is the query of a list of queues.

use serde::{Deserialize, Serialize};

/// The parameters of `GET /v1/task-types/{name}/queues`; any other is refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct QueuesQuery {
    /// Start after this queue key (the last key of the previous page).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Page size, 1..=1000 (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i32>,
}
