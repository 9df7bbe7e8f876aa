-- Held claims: a claim that is a row lock until its calls end, when they end quickly.
--
-- A claim (type_claim__<type>) rewrites each task row to 'running' and a success rewrites it
-- again to 'succeeded': two new row versions, two index entries, two commits per task. A worker
-- on the database instead opens a transaction, locks up to a batch of ready tasks with
-- type_hold__<type> (FOR UPDATE SKIP LOCKED: the lock is the claim, other workers skip
-- the rows), runs their calls, and ends the transaction with type_finish__<type>: the calls that
-- succeeded meanwhile go from 'pending' straight to 'succeeded' (one row version), the others
-- are claimed as type_claim__ would have claimed them ('running', owner, lease) and report as
-- usual. The worker finishes a hold when all its calls have replied or a short window has passed
-- (src/worker/hold.rs), so the locks are held for milliseconds. By hand, per 1,000 no-op tasks
-- (pgbench, one client): claim + success report 18 ms, hold + finish 8 ms.
--
-- What it changes, seen from outside: while a hold is open (at most its window) its tasks read
-- as 'pending' and cancel_task waits for the hold to end. If the worker dies during the window,
-- the transaction rolls back: the tasks are ready again at once (no lease to run out), and the
-- try is not counted. Types under a concurrency limit (which counts running rows) and types a
-- pipeline watches (whose trigger follows running tasks) are claimed as before: type_hold__
-- claims them with type_claim__ and says so (held = false).

create type asyncflow.held_task as (
  task_id text,
  task_type text,
  stage text,
  context jsonb,
  priority integer,
  attempt integer,
  claim_seq integer,
  user_id text,
  lease_until timestamptz,
  claimed_at timestamptz,
  -- true: locked by the caller's transaction, still 'pending' until type_finish__; false:
  -- claimed ('running') by type_claim__
  held boolean
);

create function asyncflow.create_hold_functions(p_task_type text) returns void
language plpgsql as $fn$
declare
  v_hold text := 'type_hold__' || p_task_type;
  v_finish text := 'type_finish__' || p_task_type;
begin
  perform asyncflow.check_type_name(p_task_type);
  -- type_hold__<type>(owner, limit): what type_claim__ would claim, locked instead of updated;
  -- attempt, claim_seq, lease_until and claimed_at are the values the claim will have. Must be
  -- the first statement of its transaction (now() is the claim's time).
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_limit integer)
    returns setof asyncflow.held_task
    language plpgsql security definer set search_path = pg_catalog, pg_temp
    set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off set enable_hashjoin = off
    set enable_mergejoin = off set jit = off set plan_cache_mode = force_generic_plan as $body$
    declare
      v_task_type constant text := %3$L;
      v_type asyncflow.task_types;
      v_now constant timestamptz := now();
      v_lease_until timestamptz;
    begin
      if p_owner is null or length(p_owner) not between 1 and 200 then
        perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
      end if;
      select * into v_type from asyncflow.task_types where task_type = v_task_type;
      if not found then
        perform asyncflow.raise_error('AF001', format('unknown task type %%L', v_task_type));
      end if;
      if v_type.paused or coalesce(p_limit, 0) <= 0 then
        return;
      end if;
      if v_type.concurrency is not null or exists (select 1 from pg_catalog.pg_trigger
          where tgrelid = 'asyncflow.%2$I'::regclass and tgname = 'tg_tasks__workflow') then
        return query select c.*, false from asyncflow.%4$I(p_owner, p_limit) c;
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
        t.attempt + 1, t.claim_seq + 1, t.user_id, v_lease_until, v_now, true
      from asyncflow.%2$I t
      where t.shard >= (select begin_pos from asyncflow.positions where task_type = v_task_type)
        and t.status = 'pending' and t.order_time <= v_now
      order by t.order_time
      limit least(p_limit, v_type.schedule_limit)
      -- FOR UPDATE, not FOR NO KEY UPDATE: a key-share lock taken beside it would make the
      -- row's xmax a multixact, and the finish knows its rows by xmax = its xid
      for update of t skip locked;
    end
    $body$
    $f$, v_hold, 'tasks_' || p_task_type, p_task_type, 'type_claim__' || p_task_type);

  -- type_finish__<type>(owner, shards, ids, claim_seqs, done, results, seconds): ends a hold, in
  -- the hold's transaction. A task with done and a result within max_context_bytes has
  -- succeeded, its call having taken `seconds` from the claim (finished_at, the stage-time
  -- histogram); every other is claimed ('running', leased). Only rows this transaction has
  -- locked (the hold's: their xmax is its xid), pending, whose claim_seq is one behind the one
  -- given, change: without a hold the finish changes nothing. Answers (accepted, status, lease) come only for
  -- the tasks that did not end as asked: refused (not accepted), or claimed although done (a
  -- result too large: its report will say so); no answer means succeeded, or claimed.
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_shards integer[], p_ids bigint[],
      p_claim_seqs integer[], p_done boolean[], p_results jsonb[], p_seconds double precision[])
    returns table (n bigint, task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
    language plpgsql security definer set search_path = pg_catalog, pg_temp
    set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $body$
    #variable_conflict use_column
    declare
      v_task_type constant text := %3$L;
      v_claimed_at constant timestamptz := now();
      v_ended constant double precision := date_part('epoch', clock_timestamp() - v_claimed_at);
      v_xid constant xid := pg_current_xact_id()::xid;
      v_lease_until timestamptz;
      v_max_bytes integer;
    begin
      if p_owner is null or length(p_owner) not between 1 and 200 then
        perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
      end if;
      if cardinality(p_ids) > 10000 or cardinality(p_shards) is distinct from cardinality(p_ids)
        or cardinality(p_claim_seqs) is distinct from cardinality(p_ids)
        or cardinality(p_done) is distinct from cardinality(p_ids)
        or cardinality(p_results) is distinct from cardinality(p_ids)
        or cardinality(p_seconds) is distinct from cardinality(p_ids) then
        perform asyncflow.raise_error('AF006',
          'shards, ids, claim_seqs, done, results and seconds: arrays of one length, at most 10000');
      end if;
      select v_claimed_at + make_interval(secs => max_processing_time) into v_lease_until
      from asyncflow.task_types where task_type = v_task_type;
      select max_context_bytes into v_max_bytes from asyncflow.config;
      if not true = any (p_done) then
        -- claims only: as type_claim__, not waiting for the disk
        perform set_config('synchronous_commit', 'off', true);
      end if;
      return query
      with r as (
        -- the hold's tasks, named by shard and number (no ids to parse); each once, as the
        -- worker names them (a task named twice is changed for one of its mentions, which one
        -- is not defined, and the other is answered as refused)
        select x.n, x.shard, x.id, x.claim_seq, coalesce(x.done, false) as asked,
          coalesce(x.done, false) and coalesce(pg_column_size(x.result) <= v_max_bytes, true) as done, x.result,
          -- the call's time, within what has passed since the claim; to the millisecond
          floor(least(greatest(coalesce(x.secs, v_ended), 0), v_ended) * 1000) / 1000 as secs
        from unnest(p_shards, p_ids, p_claim_seqs, p_done, p_results, p_seconds)
          with ordinality as x(shard, id, claim_seq, done, result, secs, n)
      ), changed as (
        update asyncflow.%2$I t set
          status = case when r.done then 'succeeded' else 'running' end::asyncflow.task_status,
          owner = p_owner, attempt = t.attempt + 1, claim_seq = t.claim_seq + 1, claimed_at = v_claimed_at,
          lease_until = case when not r.done then v_lease_until end,
          result = case when r.done then coalesce(r.result, '{}'::jsonb) else t.result end,
          finished_at = case when r.done then v_claimed_at + make_interval(secs => r.secs) else t.finished_at end,
          updated_at = case when r.done then v_claimed_at + make_interval(secs => r.secs) else v_claimed_at end
        from r
        where t.shard = r.shard and t.id = r.id
          -- status compared as text: the ready index must not look like a way in
          and t.status::text = 'pending' and t.claim_seq + 1 = r.claim_seq and t.xmax = v_xid
        returning r.n, t.status, t.lease_until, t.stage, r.secs
      ), counted as (
        insert into asyncflow.type_counters as k (task_type, slot, claimed, succeeded)
        select v_task_type, pg_backend_pid() %% 16, count(*), count(*) filter (where c.status = 'succeeded')
        from changed c having count(*) > 0
        on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed,
          succeeded = k.succeeded + excluded.succeeded
      ), per_bucket as (
        -- the calls that succeeded into the stage-time histogram, as type_report__ does
        select c.stage, d.k, count(*) as n, sum(c.secs) as secs
        from changed c
        cross join lateral (select width_bucket(c.secs, asyncflow.stage_time_bounds())
          - (c.secs = any (asyncflow.stage_time_bounds()))::integer as k) d
        where c.status = 'succeeded'
        group by c.stage, d.k
      ), timed as (
        insert into asyncflow.stage_times as s (task_type, stage, slot, calls, seconds, buckets)
        select v_task_type, t.stage, pg_backend_pid() %% 16, sum(coalesce(g.n, 0)), sum(coalesce(g.secs, 0)),
          array_agg(coalesce(g.n, 0) order by x.k)
        from (select distinct stage from per_bucket) t
        cross join generate_series(0, cardinality(asyncflow.stage_time_bounds())) x(k)
        left join per_bucket g on g.stage = t.stage and g.k = x.k
        group by t.stage
        on conflict (task_type, stage, slot) do update set calls = s.calls + excluded.calls,
          seconds = s.seconds + excluded.seconds,
          buckets = array(select a + b from unnest(s.buckets, excluded.buckets) with ordinality u(a, b, i) order by i)
      )
      select r.n, asyncflow.format_task_id(v_task_type, r.shard, r.id), c.n is not null,
        case when c.n is null then (select s.status from asyncflow.%2$I s where s.shard = r.shard and s.id = r.id)
          else c.status end,
        c.lease_until
      from r
      left join changed c on c.n = r.n
      where c.n is null or (c.status = 'succeeded') <> r.asked
      order by r.n;
    end
    $body$
    $f$, v_finish, 'tasks_' || p_task_type, p_task_type);
  execute format('revoke all on function asyncflow.%I(text, integer) from public', v_hold);
  execute format('grant execute on function asyncflow.%I(text, integer) to asyncflow_worker', v_hold);
  execute format('revoke all on function asyncflow.%I(text, integer[], bigint[], integer[], boolean[], jsonb[], '
    'double precision[]) from public', v_finish);
  execute format('grant execute on function asyncflow.%I(text, integer[], bigint[], integer[], boolean[], jsonb[], '
    'double precision[]) to asyncflow_worker', v_finish);
end
$fn$;
revoke all on function asyncflow.create_hold_functions(text) from public;

-- Every type gets its claim, report, hold and finish functions when it is registered, and the
-- types already there get their hold and finish functions now.
create or replace function asyncflow.tg_task_types__functions() returns trigger
language plpgsql as $$
begin
  perform asyncflow.create_claim_function(new.task_type);
  perform asyncflow.create_report_function(new.task_type);
  perform asyncflow.create_hold_functions(new.task_type);
  return null;
end
$$;

select asyncflow.create_hold_functions(task_type) from asyncflow.task_types;
