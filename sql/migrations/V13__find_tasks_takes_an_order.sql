-- find_tasks takes an order (newest or oldest first), and its private filter_tasks a direction:
-- the functions of the earlier arguments are dropped here, so that calls are not ambiguous, and
-- the new texts are applied after the migrations (sql/api/61_task_search.sql).
drop function if exists asyncflow.find_tasks(jsonb, text, integer);
drop function if exists asyncflow.filter_tasks(jsonb, asyncflow.task_status[], boolean, text, integer);
