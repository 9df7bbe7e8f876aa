-- Views for operators and autoscalers, and the grants that make the SQL API usable by roles that
-- own nothing: asyncflow_client (enqueue and admin) and asyncflow_worker (claim and report, plus
-- everything a client may do).

-- queue_depth: per task type, tasks ready now, delayed (pending, due later), running, and the age
-- of the oldest ready task in seconds (0 when none). Reads only the partial indexes' rows.
create view asyncflow.queue_depth as
select y.task_type,
  coalesce(p.ready, 0) as ready,
  coalesce(p.delayed, 0) as delayed,
  coalesce(r.running, 0) as running,
  coalesce(extract(epoch from (now() - p.oldest_ready)), 0)::double precision as oldest_ready_age,
  y.paused
from asyncflow.task_types y
left join lateral (
  select count(*) filter (where t.order_time <= now()) as ready,
         count(*) filter (where t.order_time > now()) as delayed,
         min(t.order_time) filter (where t.order_time <= now()) as oldest_ready
  from asyncflow.tasks t where t.task_type = y.task_type and t.status = 'pending'
) p on true
left join lateral (
  select count(*) as running from asyncflow.tasks t where t.task_type = y.task_type and t.status = 'running'
) r on true;

revoke all on all tables in schema asyncflow from public;
revoke all on all functions in schema asyncflow from public;
grant usage on schema asyncflow to asyncflow_client, asyncflow_worker;
grant asyncflow_client to asyncflow_worker;
grant select on asyncflow.queue_depth to asyncflow_client;
grant execute on function
  asyncflow.register_task_type(text, jsonb),
  asyncflow.create_task(text, jsonb, integer, timestamptz, text, text, text, timestamptz),
  asyncflow.create_tasks(text, jsonb, timestamptz),
  asyncflow.get_task(text),
  asyncflow.cancel_task(text, timestamptz),
  asyncflow.retry_task(text, timestamptz)
to asyncflow_client;
grant execute on function
  asyncflow.claim_tasks(text, text, integer, timestamptz),
  asyncflow.report_tasks(text, jsonb, timestamptz),
  asyncflow.next_due(text)
to asyncflow_worker;
