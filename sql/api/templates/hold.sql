-- type_hold__<type>(owner, limit): what type_claim__ would claim, locked instead of updated;
-- attempt, claim_seq, lease_until and claimed_at are the values the claim will have. A task whose
-- context no worker could read (asyncflow.unreadable) is failed instead, in the same transaction
-- (asyncflow.fail_unreadable).
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
-- instead, and say so (held = false): see fragments/hold_start.sql. A type with fair_queues has its
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
{{> hold_start}}
  v_lease_until := v_now + make_interval(secs => v_type.max_processing_time);
  -- One plain statement, no data-modifying CTE beside it: such a CTE is set up at every call, and
  -- with its three (the failure, its parent's join, the counters) the hold of 1,000 tasks took
  -- about 15 % longer. The rare row whose context no worker could read is failed by
  -- asyncflow.fail_unreadable, reached only for it (OR evaluates left to right, and a readable
  -- row makes it change nothing anyway).
  return query
  select {{> claimed_task t = p; attempt = p.attempt + 1; claim_seq = asyncflow.next_claim_seq(p.claim_seq); lease_until = v_lease_until; claimed_at = v_now}}, true
  from (
    -- the answer's columns, not t.*: the wide columns (the schedule log, the result) would be
    -- copied for nothing
    select t.shard, t.id, asyncflow.unreadable('context', t.context) as unreadable, t.stage,
      t.context, t.priority, t.attempt, t.claim_seq, t.user_id, t.queue_key, t.traceparent, t.wake
    from asyncflow.{{tasks}} t
    where t.shard >= (select begin_pos from asyncflow.positions where task_type = v_task_type)
      and t.status = 'pending' and t.order_time <= v_now
    order by t.order_time
    limit least(p_limit, v_type.schedule_limit)
    -- FOR UPDATE, not FOR NO KEY UPDATE: a key-share lock taken beside it would make the
    -- row's xmax a multixact, and the finish knows its rows by xmax = its xid
    for update of t skip locked
  ) p
  -- No ORDER BY here: the rows come in the ready index's order, and PostgreSQL cannot know that
  -- through the row locks, so it sorted them again (a fifth of the hold's time for 1,000 rows).
  -- type_claim__ answers in no set order either; a worker starts a hold's calls together.
  where p.unreadable is null or not asyncflow.fail_unreadable(v_task_type, p.shard, p.id, p.unreadable, v_now);
end
$body$;
