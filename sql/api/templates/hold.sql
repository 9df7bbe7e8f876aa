-- type_hold__<type>(owner, limit): what type_claim__ would claim, locked instead of updated;
-- attempt, claim_seq, lease_until and claimed_at are the values the claim will have. Must be the
-- first statement of its transaction (now() is the claim's time); the transaction ends with
-- type_finish__<type> (finish.sql) when the calls have replied or a short window has passed.
--
-- A claim rewrites each task row to 'running' and a success rewrites it again to 'succeeded':
-- two row versions, two index entries, two commits per task. A held claim is a row lock until
-- its calls end: the calls that succeed while it is open go from 'pending' straight to
-- 'succeeded'. While a hold is open its tasks read as 'pending' and cancel_task waits for it. If
-- the worker dies, the transaction rolls back: the tasks are ready again at once and the try is
-- not counted. Types under a concurrency limit (which counts running rows) or a rate limit, with fair_queues, or
-- watched by a pipeline (whose trigger follows running tasks) are claimed with type_claim__
-- instead, and say so (held = false).
-- Placeholders: {{hold}} this function, {{claim}} the type's claim, {{tasks}}, {{task_type}}.
create or replace function asyncflow.{{hold}}(p_owner text, p_limit integer)
returns setof asyncflow.held_task
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off set enable_hashjoin = off
set enable_mergejoin = off set jit = off set plan_cache_mode = force_generic_plan as $body$
declare
  v_task_type constant text := {{task_type}};
  v_type asyncflow.task_types;
  v_now constant timestamptz := now();
  v_lease_until timestamptz;
begin
  if p_owner is null or length(p_owner) not between 1 and 200 then
    perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
  end if;
  select * into v_type from asyncflow.task_types where task_type = v_task_type;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', v_task_type));
  end if;
  if v_type.paused or coalesce(p_limit, 0) <= 0 then
    return;
  end if;
  if v_type.concurrency is not null or v_type.fair_queues or v_type.rate_limited or exists (select 1 from pg_catalog.pg_trigger
      where tgrelid = 'asyncflow.{{tasks}}'::regclass and tgname = 'tg_tasks__workflow') then
    return query select c.*, false from asyncflow.{{claim}}(p_owner, p_limit) c;
    return;
  end if;
  -- a worker that stops answering (and so never ends the hold) loses its locks; a shorter
  -- limit set on the server stays
  if current_setting('idle_in_transaction_session_timeout') = '0' then
    perform set_config('idle_in_transaction_session_timeout', '60s', true);
  end if;
  v_lease_until := v_now + make_interval(secs => v_type.max_processing_time);
  return query
  select asyncflow.format_task_id(v_task_type, t.shard, t.id), v_task_type, t.stage, t.context, t.priority,
    t.attempt + 1, t.claim_seq + 1, t.user_id, v_lease_until, v_now, t.queue_key, true
  from asyncflow.{{tasks}} t
  where t.shard >= (select begin_pos from asyncflow.positions where task_type = v_task_type)
    and t.status = 'pending' and t.order_time <= v_now
  order by t.order_time
  limit least(p_limit, v_type.schedule_limit)
  -- FOR UPDATE, not FOR NO KEY UPDATE: a key-share lock taken beside it would make the
  -- row's xmax a multixact, and the finish knows its rows by xmax = its xid
  for update of t skip locked;
end
$body$;
