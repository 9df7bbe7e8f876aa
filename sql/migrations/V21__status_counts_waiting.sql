-- status_counts and task_type_figures answer the waiting tasks too (a column more): the
-- functions of the earlier answers are dropped here, and the new texts are applied after the
-- migrations (sql/api/65_monitoring.sql). Their callers are SQL functions, which name them only
-- in their bodies, so nothing depends on them.
drop function if exists asyncflow.task_type_figures();
drop function if exists asyncflow.status_counts();
