-- type_hold__<type>(owner, limit): what type_claim__ would claim, locked instead of updated;
-- attempt, claim_seq, lease_until and claimed_at are the values the claim will have. A task whose
-- context no worker could read (asyncflow.unreadable) is failed instead, in the same transaction.
-- Must be the first statement of its transaction (now() is the claim's time); the transaction ends with
-- type_finish__<type> (finish.sql) when the calls have replied or a short window has passed.
--
-- A claim rewrites each task row to 'running' and a success rewrites it again to 'succeeded':
-- two row versions, two index entries, two commits per task. A held claim is a row lock until
-- its calls end: the calls that succeed while it is open go from 'pending' straight to
-- 'succeeded'. While a hold is open its tasks read as 'pending' and cancel_task waits for it. If
-- the worker dies, the transaction rolls back: the tasks are ready again at once and the try is
-- not counted. Types under a concurrency limit (which counts running rows) or a rate limit, or
-- watched by a pipeline (whose trigger follows running tasks) are claimed with type_claim__
-- instead, and say so (held = false): see asyncflow.can_hold. A type with fair_queues has its
-- hold rendered from claim_fair.sql instead of this file.
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
{{> claim_start}}
  if not asyncflow.can_hold(v_type, 'asyncflow.{{tasks}}'::regclass) then
    return query select c.*, false from asyncflow.{{claim}}(p_owner, p_limit) c;
    return;
  end if;
  perform asyncflow.hold_timeout();
  v_lease_until := v_now + make_interval(secs => v_type.max_processing_time);
  return query
  with picked as (
    -- the answer's columns, not t.*: the CTE is kept in memory, and the wide columns (the
    -- schedule log, the result) made each row several times the copy. Plain columns, not one
    -- composite of the answer: `(p.task).*` took each field out of the composite apart, which
    -- made the hold of 1,000 tasks about three times as long.
    select t.shard, t.id, t.order_time, asyncflow.unreadable('context', t.context) as unreadable, t.stage,
      t.context, t.priority, t.attempt, t.claim_seq, t.user_id, t.queue_key, t.traceparent, t.wake
    from asyncflow.{{tasks}} t
    where t.shard >= (select begin_pos from asyncflow.positions where task_type = v_task_type)
      and t.status = 'pending' and t.order_time <= v_now
    order by t.order_time
    limit least(p_limit, v_type.schedule_limit)
    -- FOR UPDATE, not FOR NO KEY UPDATE: a key-share lock taken beside it would make the
    -- row's xmax a multixact, and the finish knows its rows by xmax = its xid
    for update of t skip locked
  ), failed as (
    -- a context no worker could read fails the task for good, in the hold's transaction (as
    -- type_claim__ does); the finish, never told of it, leaves it failed
    update asyncflow.{{tasks}} t set status = 'failed', attempt = t.attempt + 1, claim_seq = asyncflow.next_claim_seq(t.claim_seq),
      claimed_at = v_now, last_error = p.unreadable, finished_at = v_now, updated_at = v_now
    from picked p
    where p.unreadable is not null and t.shard = p.shard and t.id = p.id
    returning t.id, t.parent_id
  ), {{> child_ends rows = failed; ended = true}}, counted as (
    insert into asyncflow.type_counters as k (task_type, slot, failed, in_pending, in_failed)
    select v_task_type, pg_backend_pid() % 16, count(*), -count(*), count(*) from failed having count(*) > 0
    {{> add_counts}}
  )
  select {{> claimed_task t = p; attempt = p.attempt + 1; claim_seq = asyncflow.next_claim_seq(p.claim_seq); lease_until = v_lease_until; claimed_at = v_now}}, true
  from picked p where p.unreadable is null
  order by p.order_time;
end
$body$;
