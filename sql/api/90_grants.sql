-- Who may call what. Functions are created executable by PUBLIC: every grant is taken back, then
-- given to the two roles. asyncflow_worker is a member of asyncflow_client. Maintenance and the
-- private helpers are for the owner of the schema (the role that ran `asyncflow migrate`). The
-- functions generated per type grant themselves (see 15_type_functions.sql).
revoke all on all functions in schema asyncflow from public;

-- Applications: enqueue, read, cancel and retry tasks; register types; the workflow API.
grant execute on function
  asyncflow.register_task_type(text, jsonb),
  asyncflow.create_task(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text, text, integer, text, text,
    interval),
  asyncflow.create_tasks(text, jsonb, timestamptz),
  asyncflow.task_created_here(text),
  asyncflow.get_task(text),
  asyncflow.watch_task(text, double precision),
  asyncflow.list_tasks(text, asyncflow.task_status, text, text, text, integer),
  asyncflow.find_tasks(jsonb, text, integer, text),
  asyncflow.bulk_change_tasks(text, jsonb, boolean, integer, timestamptz),
  asyncflow.cancel_task(text, timestamptz),
  asyncflow.retry_task(text, timestamptz),
  asyncflow.send_event(text, jsonb, timestamptz),
  asyncflow.explain_task(text, timestamptz),
  asyncflow.task_children(text, integer),
  asyncflow.set_queue_limit(text, text, integer),
  asyncflow.queue_keys(text, text, integer),
  asyncflow.put_pipeline(text, jsonb, text),
  asyncflow.set_pipeline_status(text, integer, text),
  asyncflow.get_pipeline(text, integer),
  asyncflow.list_pipelines(),
  asyncflow.start_run(text, jsonb, text, timestamptz, text, integer, timestamptz, text, text),
  asyncflow.get_run(text),
  asyncflow.list_runs(text, text, integer, text),
  asyncflow.cancel_run(text, timestamptz),
  asyncflow.retry_run(text, timestamptz),
  asyncflow.retry_node(text, text, timestamptz),
  asyncflow.complete_node(text, text, jsonb, text, timestamptz),
  asyncflow.set_schedule(text, text, jsonb, timestamptz),
  asyncflow.remove_schedule(text),
  asyncflow.pause_schedule(text, boolean, timestamptz),
  asyncflow.list_schedules(),
  asyncflow.set_rate_limit(text, integer, double precision, timestamptz),
  asyncflow.set_queue_rate_limit(text, text, integer, double precision, timestamptz)
to asyncflow_client;
grant select on asyncflow.queue_depth to asyncflow_client;

-- Monitoring and the start-up check (65_monitoring.sql): what `asyncflow status`, a server's
-- listings, metrics and dashboard read, and whether the database is current for a build.
grant execute on function
  asyncflow.schema_state(),
  asyncflow.missing_grants(text, text[]),
  asyncflow.list_task_types(),
  asyncflow.shard_positions(text),
  asyncflow.count_by_status(text),
  asyncflow.task_type_figures(),
  asyncflow.task_counter_totals(),
  asyncflow.stage_time_totals(),
  asyncflow.workflow_figures(),
  asyncflow.status_counts(),
  asyncflow.queue_depth_rows(),
  asyncflow.stats_history(text, text, timestamptz),
  asyncflow.list_workers(double precision, timestamptz),
  asyncflow.current_leader(double precision, timestamptz),
  asyncflow.maintenance_functions(),
  asyncflow.can_maintain()
to asyncflow_client;

-- Workers say they are alive (67_workers.sql), for GET /v1/workers.
grant execute on function
  asyncflow.heartbeat_worker(text, text, integer, text[], integer, timestamptz, timestamptz),
  asyncflow.remove_worker(text),
  asyncflow.max_context_bytes()
to asyncflow_worker;

-- Workers: claims and reports (and, per type, type_claim__, type_hold__, type_finish__ and
-- type_report__).
grant execute on function
  asyncflow.claim_tasks(text, text, integer, timestamptz),
  asyncflow.report_tasks(text, jsonb, timestamptz),
  asyncflow.report_task_arrays(text, text[], bigint[], text[], text[], jsonb[], jsonb[], text[], boolean[],
    double precision[], timestamptz, jsonb[]),
  asyncflow.next_due(text),
  asyncflow.held_tasks(text, text),
  asyncflow.set_progress(text, bigint, jsonb),
  asyncflow.checkpoint_task(text, bigint, jsonb)
to asyncflow_worker;
