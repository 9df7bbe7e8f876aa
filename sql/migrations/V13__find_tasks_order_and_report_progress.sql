-- find_tasks takes an order (newest or oldest first), and its private filter_tasks a direction:
-- the functions of the earlier arguments are dropped here, so that calls are not ambiguous, and
-- the new texts are applied after the migrations (sql/api/61_task_search.sql).
drop function if exists asyncflow.find_tasks(jsonb, text, integer);
drop function if exists asyncflow.filter_tasks(jsonb, asyncflow.task_status[], boolean, text, integer);
-- The report arrays take each report's progress (sql/api/40_report.sql): report_task_arrays and
-- check_report_arrays of the earlier arguments go too; each type's type_report__ of the earlier
-- arguments is dropped when its functions are made again (create_type_functions).
drop function if exists asyncflow.report_task_arrays(text, text[], bigint[], text[], text[], jsonb[], jsonb[], text[],
  boolean[], double precision[], timestamptz);
drop function if exists asyncflow.check_report_arrays(text[], bigint[], text[], text[], jsonb[], jsonb[], text[],
  boolean[], double precision[]);
