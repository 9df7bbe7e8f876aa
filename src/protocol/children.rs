//! A task's children (`GET /v1/tasks/{id}/children`, `asyncflow.task_children`): the tasks its
//! `spawn` replies created, for the dashboard's task page and any client.

use serde::{Deserialize, Serialize};

use crate::task::TaskStatus;

/// One child: its id, type and status (`get_task` gives the rest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Child {
    /// Task id.
    pub id: String,
    /// Task type.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Its status now.
    pub status: TaskStatus,
}

/// A task's children, oldest first (spawn order within a spawn and a type), at most the limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TaskChildren {
    /// How many children it has in all.
    pub total: i64,
    /// The first of them.
    pub children: Vec<Child>,
}
