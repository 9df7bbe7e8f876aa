-- Plans that stay cheap however many types and shards there are (V17 mended).
--
-- V17 gave claim_tasks and report_task_arrays generic plans, made once per connection. A generic
-- plan of a statement on asyncflow.tasks covers every leaf of every type (the type is a
-- parameter), and it is costed that way: with a few dozen leaves the planner found a hash join of
-- the claimed rows against a full read of the type's primary key cheaper than one probe per row
-- in each leaf. With 63 types of one shard each a claim of one task took 0.6 s instead of
-- 0.4 ms. Even with the right join, such a plan opens and locks every leaf of every type at each
-- call. Planning at each call instead prunes the other types' leaves while planning, but the
-- planning itself (about 0.7 ms for a claim on an idle server) sits on the path from an insert to
-- the function's start.
--
-- So a claim is kept once per type: each type has its own claim function,
-- asyncflow.type_claim__<type>, whose statement names the type's own table
-- (asyncflow.tasks_<type>, its shards only) and keeps its generic plan for the session. The
-- worker calls it directly; claim_tasks (the SQL API, for any type) calls it by name. Likewise
-- each type has its report function, asyncflow.type_report__<type>, which report_task_arrays
-- calls for the reports of that type once it has checked the batch.

-- Creates (or replaces) the claim function of a type: claim_tasks' contract for that one type
-- (see V5 for the checks, the locks, the asynchronous commit and the plan it must have: an
-- ordered walk of the ready index, then one primary-key probe per claimed row, forced by the
-- settings below whatever the statistics say, hash and merge joins included). Its one statement
-- also reads begin_pos and counts the claim. Identifiers come from a checked type name and are
-- quoted with %I, the name as a value with %L. EXECUTE for asyncflow_worker only.
create function asyncflow.create_claim_function(p_task_type text) returns void
language plpgsql as $fn$
declare
  v_name text := 'type_claim__' || p_task_type;
begin
  perform asyncflow.check_type_name(p_task_type);
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_limit integer, p_now timestamptz default null)
    returns setof asyncflow.claimed_task
    language plpgsql security definer set search_path = pg_catalog, pg_temp
    set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off set enable_hashjoin = off
    set enable_mergejoin = off set jit = off set plan_cache_mode = force_generic_plan as $body$
    declare
      v_task_type constant text := %3$L;
      v_type asyncflow.task_types;
      v_now timestamptz := coalesce(p_now, now());
      v_limit integer;
      v_running bigint;
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
      v_limit := least(p_limit, v_type.schedule_limit);
      if v_type.concurrency is not null then
        perform 1 from asyncflow.task_types where task_type = v_task_type for update;
        select count(*) into v_running from asyncflow.%2$I where status = 'running';
        v_limit := least(v_limit, v_type.concurrency - v_running);
        if v_limit <= 0 then
          return;
        end if;
      end if;
      perform set_config('synchronous_commit', 'off', true);

      return query
      with picked as (
        select shard, id from asyncflow.%2$I
        where shard >= (select begin_pos from asyncflow.positions where task_type = v_task_type)
          and status = 'pending' and order_time <= v_now
        order by order_time
        limit v_limit
        for update skip locked
      ), claimed as (
        update asyncflow.%2$I t set
          status = 'running', owner = p_owner, attempt = t.attempt + 1, claim_seq = t.claim_seq + 1,
          claimed_at = v_now, lease_until = v_now + make_interval(secs => v_type.max_processing_time),
          updated_at = v_now
        from picked
        where t.shard = picked.shard and t.id = picked.id
        returning asyncflow.format_task_id(v_task_type, t.shard, t.id) as task_id, v_task_type as task_type,
          t.stage, t.context, t.priority, t.attempt, t.claim_seq, t.user_id, t.lease_until, t.claimed_at
      ), counted as (
        insert into asyncflow.type_counters as k (task_type, slot, claimed)
        select v_task_type, pg_backend_pid() %% 16, count(*) from claimed having count(*) > 0
        on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed
      )
      select * from claimed;
    end
    $body$
    $f$, v_name, 'tasks_' || p_task_type, p_task_type);
  execute format('revoke all on function asyncflow.%I(text, integer, timestamptz) from public', v_name);
  execute format('grant execute on function asyncflow.%I(text, integer, timestamptz) to asyncflow_worker', v_name);
end
$fn$;

-- Creates (or replaces) the report function of a type: report_task_arrays' statement (V16) for
-- the reports of that one type, on the type's own table, so that it keeps one plan per session
-- (called by report_task_arrays, which checks the batch first). Identifiers come from a checked
-- type name and are quoted with %I, the name as a value with %L.
create function asyncflow.create_report_function(p_task_type text) returns void
language plpgsql as $fn$
declare
  v_name text := 'type_report__' || p_task_type;
begin
  perform asyncflow.check_type_name(p_task_type);
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_task_ids text[], p_claim_seqs integer[],
      p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[],
      p_retries boolean[], p_delays double precision[], p_now timestamptz)
    returns table (n bigint, task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
    language plpgsql as $body$
    #variable_conflict use_column
    declare
      v_task_type constant text := %3$L;
      v_now constant timestamptz := p_now;
    begin
      return query
      with r as (
        -- one pass of unnest over the typed arrays; ids are split inline (a lateral call to
        -- parse_task_id is not inlined and cost more than the update)
        select x.n, x.task_id,
          split_part(x.task_id, '-', 2)::integer as shard, split_part(x.task_id, '-', 3)::bigint as id,
          x.claim_seq, x.outcome, x.stage, nullif(x.context, 'null'::jsonb) as context, x.result,
          left(x.error, 256) as error, coalesce(x.retry, true) as retry, x.delay
        from unnest(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries, p_delays)
          with ordinality as x(task_id, claim_seq, outcome, stage, context, result, error, retry, delay, n)
        where split_part(x.task_id, '-', 1) = v_task_type
      ), changed as (
        update asyncflow.%2$I t set
          status = case
            when r.outcome = 'succeed' then 'succeeded'
            when r.outcome = 'heartbeat' then 'running'
            when r.outcome = 'fail' and (not r.retry or t.attempt > t.max_retry_num) then 'failed'
            else 'pending' end::asyncflow.task_status,
          stage = case when r.outcome = 'advance' then r.stage else t.stage end,
          context = case when r.outcome in ('advance', 'later') then coalesce(r.context, t.context) else t.context end,
          result = case when r.outcome = 'succeed' then coalesce(r.result, '{}'::jsonb) else t.result end,
          last_error = case when r.outcome = 'fail' then coalesce(r.error, 'failed') else t.last_error end,
          attempt = case
            when r.outcome = 'advance' then 0
            when r.outcome in ('later', 'release') then greatest(t.attempt - 1, 0)
            else t.attempt end,
          retry_count = case when r.outcome = 'fail' then t.retry_count + 1 else t.retry_count end,
          order_time = case
            when r.outcome = 'advance' then v_now - make_interval(secs => t.priority)
            when r.outcome = 'fail' then v_now + asyncflow.retry_backoff(t.attempt, t.max_retry_interval)
            when r.outcome = 'later' then v_now + make_interval(secs => r.delay)
            else t.order_time end,
          owner = case when r.outcome = 'heartbeat' then t.owner end,
          lease_until = case when r.outcome = 'heartbeat'
            then v_now + make_interval(secs => (select max_processing_time from asyncflow.task_types y where y.task_type = t.task_type)) end,
          finished_at = case
            when r.outcome = 'succeed' or (r.outcome = 'fail' and (not r.retry or t.attempt > t.max_retry_num)) then v_now
            else t.finished_at end,
          -- the entry is built as cheaply as jsonb allows (a third of the report's cost was here):
          -- date_part in double precision rather than numeric extract, and the error key added only
          -- to failures instead of stripping nulls from every entry
          schedule_log = case when r.outcome = 'heartbeat' then t.schedule_log
            else asyncflow.append_log(t.schedule_log, case when r.outcome = 'fail'
              then jsonb_build_object('worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
                'cost_ms', floor(date_part('epoch', v_now - t.claimed_at) * 1000)::bigint, 'outcome', r.outcome,
                'error', coalesce(r.error, 'failed'))
              else jsonb_build_object('worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
                'cost_ms', floor(date_part('epoch', v_now - t.claimed_at) * 1000)::bigint, 'outcome', r.outcome) end) end,
          updated_at = v_now
        -- a task named twice in one batch: its last report wins, the earlier ones are refused
        from (select distinct on (shard, id) * from r order by shard, id, n desc) r
        where t.shard = r.shard and t.id = r.id
          -- status compared as text: the partial index on running tasks must not look like a way
          -- in (the planner would walk every running task for each report)
          and t.status::text = 'running' and t.owner = p_owner and t.claim_seq = r.claim_seq
        returning r.n, t.status, t.lease_until, t.task_type, r.outcome, t.schedule_log -> -1 as entry
      ), counted as (
        insert into asyncflow.type_counters as k (task_type, slot, succeeded, failed, retried)
        select c.task_type, pg_backend_pid() %% 16, count(*) filter (where c.status = 'succeeded'),
          count(*) filter (where c.status = 'failed'), count(*) filter (where c.outcome = 'fail' and c.status = 'pending')
        from changed c where c.outcome in ('succeed', 'fail') group by c.task_type
        on conflict (task_type, slot) do update set succeeded = k.succeeded + excluded.succeeded,
          failed = k.failed + excluded.failed, retried = k.retried + excluded.retried
      ), durations as (
        -- k: how many bounds lie below the duration (its bucket, 0 .. cardinality(bounds)):
        -- width_bucket counts the bounds <= secs (a binary search, in C), less one when secs is a
        -- bound itself (a bucket includes its upper bound, as Prometheus' "le")
        select c.task_type, c.entry ->> 'stage' as stage, d.secs,
          width_bucket(d.secs, asyncflow.stage_time_bounds()) - (d.secs = any (asyncflow.stage_time_bounds()))::integer as k
        from changed c cross join lateral (select (c.entry ->> 'cost_ms')::double precision / 1000 as secs) d
        where c.outcome not in ('heartbeat', 'release')
      ), per_bucket as (
        select task_type, stage, k, count(*) as n, sum(secs) as secs from durations group by task_type, stage, k
      ), timed as (
        insert into asyncflow.stage_times as s (task_type, stage, slot, calls, seconds, buckets)
        select t.task_type, t.stage, pg_backend_pid() %% 16, sum(coalesce(g.n, 0)), sum(coalesce(g.secs, 0)),
          array_agg(coalesce(g.n, 0) order by x.k)
        from (select distinct task_type, stage from per_bucket) t
        cross join generate_series(0, cardinality(asyncflow.stage_time_bounds())) x(k)
        left join per_bucket g on g.task_type = t.task_type and g.stage = t.stage and g.k = x.k
        group by t.task_type, t.stage
        on conflict (task_type, stage, slot) do update set calls = s.calls + excluded.calls,
          seconds = s.seconds + excluded.seconds,
          buckets = array(select a + b from unnest(s.buckets, excluded.buckets) with ordinality u(a, b, i) order by i)
      )
      select r.n, r.task_id, c.n is not null,
        -- the current status is looked up only for refused reports
        case when c.n is null then (select s.status from asyncflow.%2$I s
          where s.shard = r.shard and s.id = r.id)
          else c.status end,
        c.lease_until
      from r
      left join changed c on c.n = r.n
      order by r.n;
    end
    $body$
    $f$, v_name, 'tasks_' || p_task_type, p_task_type);
  execute format('revoke all on function asyncflow.%I(text, text[], integer[], text[], text[], jsonb[], jsonb[], '
    'text[], boolean[], double precision[], timestamptz) from public', v_name);
end
$fn$;

-- Every type gets its claim and report functions when it is registered (register_task_type
-- inserts the task_types row), and the types already there get theirs now.
create function asyncflow.tg_task_types__functions() returns trigger
language plpgsql as $$
begin
  perform asyncflow.create_claim_function(new.task_type);
  perform asyncflow.create_report_function(new.task_type);
  return null;
end
$$;

create trigger tg_task_types__functions after insert on asyncflow.task_types
for each row execute function asyncflow.tg_task_types__functions();

select asyncflow.create_claim_function(task_type), asyncflow.create_report_function(task_type)
from asyncflow.task_types;

-- claim_tasks: the same contract (V5), for any type: the type's claim function does the work.
create or replace function asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamptz default null)
returns setof asyncflow.claimed_task
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  if p_owner is null or length(p_owner) not between 1 and 200 then
    perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
  end if;
  perform 1 from asyncflow.task_types where task_type = p_task_type;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  -- a task_types key passed check_type_name when the type was registered
  return query execute format('select * from asyncflow.%I($1, $2, $3)', 'type_claim__' || p_task_type)
    using p_owner, p_limit, p_now;
end
$$;

-- report_task_arrays: as in V16 (the same checks first), the statement now in the report function
-- of each type the batch names.
create or replace function asyncflow.report_task_arrays(
  p_owner text,
  p_task_ids text[],
  p_claim_seqs integer[],
  p_outcomes text[],
  p_stages text[] default null,
  p_contexts jsonb[] default null,
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_retries boolean[] default null,
  p_delays double precision[] default null,
  p_now timestamptz default null
)
returns table (task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
language plpgsql security definer set search_path = pg_catalog, pg_temp
-- one primary-key probe per report, never a scan (see claim_tasks); these settings hold for the
-- type's report function too, whose kept plan covers the type's shards only
set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
  v_now timestamptz := coalesce(p_now, now());
  v_n integer := coalesce(cardinality(p_task_ids), 0);
  v_bad record;
  v_max_bytes integer;
  v_names text[];
  v_types text[];
begin
  if p_task_ids is null or p_claim_seqs is null or p_outcomes is null then
    perform asyncflow.raise_error('AF006', 'task ids, claim_seqs and outcomes are required');
  end if;
  -- unnest pads a short array with nulls and flattens a multi-dimensional one: both refused
  if cardinality(p_claim_seqs) <> v_n or cardinality(p_outcomes) <> v_n
    or coalesce(cardinality(p_stages), v_n) <> v_n or coalesce(cardinality(p_contexts), v_n) <> v_n
    or coalesce(cardinality(p_results), v_n) <> v_n or coalesce(cardinality(p_errors), v_n) <> v_n
    or coalesce(cardinality(p_retries), v_n) <> v_n or coalesce(cardinality(p_delays), v_n) <> v_n
    or coalesce(array_ndims(p_task_ids), 1) <> 1 or coalesce(array_ndims(p_claim_seqs), 1) <> 1
    or coalesce(array_ndims(p_outcomes), 1) <> 1 or coalesce(array_ndims(p_stages), 1) <> 1
    or coalesce(array_ndims(p_contexts), 1) <> 1 or coalesce(array_ndims(p_results), 1) <> 1
    or coalesce(array_ndims(p_errors), 1) <> 1 or coalesce(array_ndims(p_retries), 1) <> 1
    or coalesce(array_ndims(p_delays), 1) <> 1 then
    perform asyncflow.raise_error('AF006', format(
      'the report arrays must be one-dimensional with one element per report (%s task ids)', v_n));
  end if;
  select max_context_bytes into v_max_bytes from asyncflow.config;
  select n, problem into v_bad from (
    select n, case
      -- the same rule as parse_task_id, written as an unbounded pattern plus lengths (several
      -- times cheaper per row than bounded repetitions)
      when x.task_id is null or x.task_id !~ '^[a-z][a-z0-9_]*-[1-9][0-9]*-[1-9][0-9]*$'
        or length(split_part(x.task_id, '-', 1)) > 40 or length(split_part(x.task_id, '-', 2)) > 9
        or length(split_part(x.task_id, '-', 3)) > 18
        then format('task_id must be a task id (<type>-<shard>-<n>), got %s', coalesce(to_jsonb(x.task_id), 'null'))
      when x.claim_seq is null then 'claim_seq must be an integer, got null'
      when x.outcome is null or x.outcome not in ('advance', 'succeed', 'fail', 'later', 'release', 'heartbeat')
        then format('outcome must be one of advance, succeed, fail, later, release, heartbeat, got %s',
          coalesce(to_jsonb(x.outcome), 'null'))
      when x.outcome = 'advance' and coalesce(x.stage, '') !~ '^[A-Za-z0-9_.:/-]{1,64}$'
        then format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', coalesce(to_jsonb(x.stage), 'null'))
      when x.outcome in ('advance', 'later') and jsonb_typeof(x.context) not in ('object', 'null')
        then 'context must be a JSON object'
      when pg_column_size(x.context) > v_max_bytes
        then format('context is too large: %s bytes, the limit is %s', pg_column_size(x.context), v_max_bytes)
      when pg_column_size(x.result) > v_max_bytes
        then format('result is too large: %s bytes, the limit is %s', pg_column_size(x.result), v_max_bytes)
      when x.outcome = 'later' and (x.delay is null or x.delay = 'NaN' or x.delay not between 0 and 31536000)
        then format('delay must be a number of seconds between 0 and 31536000, got %s', coalesce(x.delay::text, 'null'))
    end as problem
    from unnest(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_delays)
      with ordinality as x(task_id, claim_seq, outcome, stage, context, result, delay, n)
  ) checked where problem is not null order by n limit 1;
  if found then
    perform asyncflow.raise_error('AF006', format('reports[%s]: %s', v_bad.n - 1, v_bad.problem));
  end if;

  -- The batch's known types. Each has its report function (its statement kept with its plan);
  -- the reports of a type that does not exist are refused (no such task).
  v_names := array(select distinct split_part(u.task_id, '-', 1) from unnest(p_task_ids) u(task_id));
  v_types := array(select y.task_type from asyncflow.task_types y where y.task_type = any (v_names));
  if cardinality(v_names) = 1 and cardinality(v_types) = 1 then
    -- the usual batch: one type; the function's rows come in report order
    return query execute format('select task_id, accepted, status, lease_until from asyncflow.%I('
      '$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)', 'type_report__' || v_types[1])
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now;
  else
    return query execute 'select task_id, accepted, status, lease_until from ('
      || (select coalesce(string_agg(format('select * from asyncflow.%I($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) '
            'union all ', 'type_report__' || t), ''), '') from unnest(v_types) t)
      || 'select u.n, u.task_id, false, null::asyncflow.task_status, null::timestamptz '
      || 'from unnest($2) with ordinality u(task_id, n) where split_part(u.task_id, ''-'', 1) <> all ($12)) x order by n'
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now, v_types;
  end if;

  -- Tasks that went back to pending are ready for any worker of the type (one NOTIFY per type).
  perform asyncflow.wake(y.task_type)
  from (select distinct split_part(u.task_id, '-', 1) as task_type
        from unnest(p_task_ids, p_outcomes) u(task_id, outcome)
        where u.outcome in ('advance', 'release', 'fail', 'later')) y;
end
$$;
