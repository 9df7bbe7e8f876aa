-- A run keeps the W3C trace context it was started with (the caller's traceparent) and hands
-- it to the tasks of its nodes, so a workflow's calls join the trace that started it.
alter table asyncflow.runs add column traceparent text;

-- start_run, wf_new_run and wf_create_tasks take it as a new last argument: their old forms are
-- dropped here, so that calls are not ambiguous, and the new text is applied after the
-- migrations (sql/api/71_workflow_engine.sql, 72_workflow_api.sql).
drop function if exists asyncflow.start_run(text, jsonb, text, timestamptz, text, integer, timestamptz, text);
drop function if exists asyncflow.wf_new_run(text, integer, jsonb, text, text, timestamptz, text, integer, integer,
  text, timestamptz);
drop function if exists asyncflow.wf_create_tasks(jsonb, jsonb, text[]);
