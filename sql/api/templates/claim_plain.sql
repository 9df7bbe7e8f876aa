-- type_claim__<type>(owner, limit, now) of a type without fair_queues: up to `limit` (at most
-- the type's schedule_limit, and under its concurrency limit) ready tasks in order_time order,
-- FOR UPDATE SKIP LOCKED, each stamped running with its owner, a lease and a new claim_seq (the
-- fencing token its reports must carry: asyncflow.next_claim_seq); a task whose context no worker could read fails instead
-- (asyncflow.unreadable), and the rest of the batch is claimed. Rendered per type by asyncflow.create_type_functions:
-- {{claim}} is the function's name, {{tasks}} the type's table, {{task_type}} its name as a
-- literal.
-- Planned once per type (force_generic_plan) on the type's own indexes.
create or replace function asyncflow.{{claim}}(p_owner text, p_limit integer, p_now timestamptz default null)
returns setof asyncflow.claimed_task
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off set enable_hashjoin = off
set enable_mergejoin = off set jit = off set plan_cache_mode = force_generic_plan as $body$
declare
  v_task_type constant text := {{task_type}};
  v_type asyncflow.task_types;
  v_now timestamptz := asyncflow.check_now(p_now);
  v_limit integer;
  v_running bigint;
  v_started integer;
begin
{{> claim_start}}
{{> claim_limit}}
  perform set_config('synchronous_commit', 'off', true);

  return query
  with picked as (
    select shard, id, asyncflow.unreadable('context', context) as unreadable from asyncflow.{{tasks}}
    where shard >= (select begin_pos from asyncflow.positions where task_type = v_task_type)
      and status = 'pending' and order_time <= v_now
    order by order_time
    limit v_limit
    for update skip locked
  ), claimed as (
    update asyncflow.{{tasks}} t set
      -- a context no worker could read (asyncflow.unreadable) fails the task for good here
      status = case when picked.unreadable is null then 'running' else 'failed' end::asyncflow.task_status,
      owner = case when picked.unreadable is null then p_owner end, attempt = t.attempt + 1,
      claim_seq = asyncflow.next_claim_seq(t.claim_seq), claimed_at = v_now,
      lease_until = case when picked.unreadable is null then v_now + make_interval(secs => v_type.max_processing_time) end,
      last_error = coalesce(picked.unreadable, t.last_error),
      finished_at = case when picked.unreadable is null then t.finished_at else v_now end,
      updated_at = v_now
    from picked
    where t.shard = picked.shard and t.id = picked.id
    -- the answer's columns, taken up by the select at the end (one composite of the answer cost
    -- a field extraction per column and row there)
    returning t.shard, t.id, t.stage, t.context, t.priority, t.attempt, t.claim_seq, t.user_id, t.lease_until,
      t.claimed_at, t.queue_key, t.traceparent, t.wake, picked.unreadable, t.parent_id
  ), {{> child_ends rows = claimed; ended = c.unreadable is not null}}, counted as (
    insert into asyncflow.type_counters as k (task_type, slot, claimed, failed, in_pending, in_running, in_failed)
    select v_task_type, pg_backend_pid() % 16, count(*) filter (where c.unreadable is null),
      count(*) filter (where c.unreadable is not null), -count(*), count(*) filter (where c.unreadable is null),
      count(*) filter (where c.unreadable is not null)
    from claimed c having count(*) > 0
    {{> add_counts}}
  )
  select {{> claimed_task t = c}} from claimed c where c.unreadable is null;
  if v_type.rate_limited then
    get diagnostics v_started = row_count;
    perform asyncflow.rate_spend(v_task_type, v_started);
  end if;
end
$body$;
