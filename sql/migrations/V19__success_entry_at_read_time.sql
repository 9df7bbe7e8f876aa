-- A success writes no schedule-log entry: the entry is made from the row when the task is read.
--
-- Building and appending the entry of every report (a jsonb object of six keys, a timestamp
-- written out as text, the array copied and extended) was a quarter of a report's cost; most
-- reports are successes, and a success leaves on the row everything its entry says: the worker
-- (owner, now kept by a success), the stage, the attempt, the start (claimed_at) and the end
-- (finished_at). Measured on 1,000 reported successes (PostgreSQL 15, 2 cores, claims and
-- reports committed, variants alternated): 22.5 ms with the entry written, 17 ms without.
--
-- What a reader sees does not change: asyncflow.task_log(t) is the log with the success's entry
-- at its end (the last 20 entries, as before), and task_json shows it, with owner null for a
-- finished task as before. A task that succeeded before this migration has its entry written
-- and owner null: it is shown as it is. The stage-time histogram takes a success's duration
-- from the row; the workflow trace takes its outcome from the status.
--
-- A batch of successes only gets a statement of its own (see create_report_function below).

-- The task's schedule log as readers see it: a task that succeeded (and kept its worker as
-- owner, V19 on) gets its success's entry, made exactly as the report made it before.
create function asyncflow.task_log(t asyncflow.tasks) returns jsonb
language sql stable parallel safe as $$
  select case when t.status = 'succeeded' and t.owner is not null
    then asyncflow.append_log(t.schedule_log, jsonb_build_object('worker', t.owner, 'stage', t.stage,
      'attempt', t.attempt, 'start', t.claimed_at,
      'cost_ms', floor(date_part('epoch', t.finished_at - t.claimed_at) * 1000)::bigint, 'outcome', 'succeed'))
    else t.schedule_log end
$$;
revoke all on function asyncflow.task_log(asyncflow.tasks) from public;

-- The public form of a task (V4), its log through task_log; owner shown only while it means
-- something (a succeeded task keeps its worker for its log entry).
create or replace function asyncflow.task_json(t asyncflow.tasks) returns jsonb
language sql stable as $$
  select jsonb_build_object(
    'id', asyncflow.format_task_id(t.task_type, t.shard, t.id), 'type', t.task_type, 'stage', t.stage,
    'status', t.status, 'priority', t.priority, 'attempt', t.attempt, 'retry_count', t.retry_count,
    'max_retry_num', t.max_retry_num, 'max_retry_interval', t.max_retry_interval, 'claim_seq', t.claim_seq,
    'owner', case when t.status <> 'succeeded' then t.owner end, 'lease_until', t.lease_until,
    'order_time', t.order_time, 'user_id', t.user_id,
    'idempotency_key', t.idempotency_key, 'context', t.context, 'result', t.result, 'error', t.last_error,
    'schedule_log', asyncflow.task_log(t), 'created_at', t.created_at, 'updated_at', t.updated_at,
    'finished_at', t.finished_at)
$$;

-- The checks of a batch of reports (report_task_arrays' since V16, now shared with each type's
-- report function, which the worker calls directly): AF006 naming the first bad report and
-- field, nothing applied.
create function asyncflow.check_report_arrays(p_task_ids text[], p_claim_seqs integer[], p_outcomes text[],
  p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[],
  p_delays double precision[]) returns void
language plpgsql stable as $$
#variable_conflict use_column
declare
  v_n integer := coalesce(cardinality(p_task_ids), 0);
  v_bad record;
  v_max_bytes integer;
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
end
$$;
revoke all on function asyncflow.check_report_arrays(text[], integer[], text[], text[], jsonb[], jsonb[], text[],
  boolean[], double precision[]) from public;

-- The report function of each type (V18), writing no entry for a success, with a statement of
-- its own for a batch of successes only: the general statement chooses between six outcomes
-- for every column of every report and unnests nine arrays; on 1,000 successes it took about
-- 20 ms against 16 ms for the successes' own statement (alternated, committed).
create or replace function asyncflow.create_report_function(p_task_type text) returns void
language plpgsql as $fn$
declare
  v_name text := 'type_report__' || p_task_type;
  -- The end of both statements: the durations of the calls ("durations": stage, secs, k) into the
  -- stage-time histogram, and one answer per report, in report order (%%s: the lease it answers).
  v_tail text;
begin
  perform asyncflow.check_type_name(p_task_type);
  v_tail := format($s$per_bucket as (
          select stage, k, count(*) as n, sum(secs) as secs from durations group by stage, k
        ), timed as (
          insert into asyncflow.stage_times as s (task_type, stage, slot, calls, seconds, buckets)
          select v_task_type, t.stage, pg_backend_pid() %%%% 16, sum(coalesce(g.n, 0)), sum(coalesce(g.secs, 0)),
            array_agg(coalesce(g.n, 0) order by x.k)
          from (select distinct stage from per_bucket) t
          cross join generate_series(0, cardinality(asyncflow.stage_time_bounds())) x(k)
          left join per_bucket g on g.stage = t.stage and g.k = x.k
          group by t.stage
          on conflict (task_type, stage, slot) do update set calls = s.calls + excluded.calls,
            seconds = s.seconds + excluded.seconds,
            buckets = array(select a + b from unnest(s.buckets, excluded.buckets) with ordinality u(a, b, i) order by i)
        )
        select r.n, r.task_id, c.n is not null,
          -- the current status is looked up only for refused reports
          case when c.n is null then (select s.status from asyncflow.%1$I s
            where s.shard = r.shard and s.id = r.id)
            else c.status end,
          %%s
        from r
        left join changed c on c.n = r.n
        order by r.n$s$, 'tasks_' || p_task_type);
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_task_ids text[], p_claim_seqs integer[],
      p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[],
      p_retries boolean[], p_delays double precision[], p_now timestamptz)
    returns table (n bigint, task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
    language plpgsql security definer set search_path = pg_catalog, pg_temp
    set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $body$
    #variable_conflict use_column
    declare
      v_task_type constant text := %3$L;
      v_now constant timestamptz := coalesce(p_now, now());
    begin
      perform asyncflow.check_report_arrays(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results,
        p_errors, p_retries, p_delays);
      if p_outcomes <@ array['succeed'] then
        -- A batch of successes only (every report of a one-stage burn-down, most batches of a
        -- busy worker): the same effects, counters and answers as the general statement below,
        -- without its per-report choices between outcomes and without the arrays a success does
        -- not use (a fifth of the report's cost).
        return query
        with r as (
          select x.n, x.task_id,
            split_part(x.task_id, '-', 2)::integer as shard, split_part(x.task_id, '-', 3)::bigint as id,
            x.claim_seq, x.result
          from unnest(p_task_ids, p_claim_seqs, p_results) with ordinality as x(task_id, claim_seq, result, n)
          where split_part(x.task_id, '-', 1) = v_task_type
        ), changed as (
          update asyncflow.%2$I t set
            status = 'succeeded', result = coalesce(r.result, '{}'::jsonb), lease_until = null,
            finished_at = v_now, updated_at = v_now
          from (select distinct on (shard, id) * from r order by shard, id, n desc) r
          where t.shard = r.shard and t.id = r.id
            and t.status::text = 'running' and t.owner = p_owner and t.claim_seq = r.claim_seq
          returning r.n, t.status, t.stage, t.claimed_at
        ), counted as (
          insert into asyncflow.type_counters as k (task_type, slot, succeeded)
          select v_task_type, pg_backend_pid() %% 16, count(*) from changed having count(*) > 0
          on conflict (task_type, slot) do update set succeeded = k.succeeded + excluded.succeeded
        ), durations as (
          select c.stage, d.secs,
            width_bucket(d.secs, asyncflow.stage_time_bounds()) - (d.secs = any (asyncflow.stage_time_bounds()))::integer as k
          from changed c
          cross join lateral (select floor(date_part('epoch', v_now - c.claimed_at) * 1000) / 1000 as secs) d
        ), %4$s;
        return;
      end if;

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
          -- a success keeps its worker: the log's last entry is made from the row when read
          owner = case when r.outcome in ('heartbeat', 'succeed') then t.owner end,
          lease_until = case when r.outcome = 'heartbeat'
            then v_now + make_interval(secs => (select max_processing_time from asyncflow.task_types y where y.task_type = t.task_type)) end,
          finished_at = case
            when r.outcome = 'succeed' or (r.outcome = 'fail' and (not r.retry or t.attempt > t.max_retry_num)) then v_now
            else t.finished_at end,
          -- the entry is built as cheaply as jsonb allows: date_part in double precision rather
          -- than numeric extract, and the error key added only to failures instead of stripping
          -- nulls from every entry; a success's entry is not written at all (asyncflow.task_log
          -- makes it from the row: worker, stage, attempt, claimed_at and finished_at are all there)
          schedule_log = case when r.outcome in ('heartbeat', 'succeed') then t.schedule_log
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
        returning r.n, t.status, t.lease_until, t.task_type, r.outcome,
          case when r.outcome <> 'succeed' then t.schedule_log -> -1 end as entry, t.stage, t.claimed_at
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
        select coalesce(c.entry ->> 'stage', c.stage) as stage, d.secs,
          width_bucket(d.secs, asyncflow.stage_time_bounds()) - (d.secs = any (asyncflow.stage_time_bounds()))::integer as k
        from changed c cross join lateral (select case when c.entry is null
          then floor(date_part('epoch', v_now - c.claimed_at) * 1000) / 1000
          else (c.entry ->> 'cost_ms')::double precision / 1000 end as secs) d
        where c.outcome not in ('heartbeat', 'release')
      ), %5$s;

      -- Tasks that went back to pending are ready for any worker of the type (one NOTIFY).
      if exists (select 1 from unnest(p_task_ids, p_outcomes) u(task_id, outcome)
          where u.outcome in ('advance', 'release', 'fail', 'later') and split_part(u.task_id, '-', 1) = v_task_type) then
        perform asyncflow.wake(v_task_type);
      end if;
    end
    $body$
    $f$, v_name, 'tasks_' || p_task_type, p_task_type, format(v_tail, 'null::timestamptz'), format(v_tail, 'c.lease_until'));
  execute format('revoke all on function asyncflow.%I(text, text[], integer[], text[], text[], jsonb[], jsonb[], '
    'text[], boolean[], double precision[], timestamptz) from public', v_name);
  execute format('grant execute on function asyncflow.%I(text, text[], integer[], text[], text[], jsonb[], jsonb[], '
    'text[], boolean[], double precision[], timestamptz) to asyncflow_worker', v_name);
end
$fn$;

select asyncflow.create_report_function(task_type) from asyncflow.task_types;

-- report_task_arrays (V18): a batch of one type goes straight to the type's report function,
-- which now checks the batch and wakes the type itself (the worker calls it directly).
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
-- one primary-key probe per report, never a scan (see claim_tasks); the type's report function
-- sets the same for its own statement
set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
  v_now timestamptz := coalesce(p_now, now());
  v_names text[];
  v_types text[];
begin
  -- The batch's known types. Each has its report function (its statement kept with its plan),
  -- which checks the batch, applies that type's reports and wakes the type; the reports of a type
  -- that does not exist are refused (no such task).
  v_names := array(select distinct split_part(u.task_id, '-', 1) from unnest(p_task_ids) u(task_id));
  v_types := array(select y.task_type from asyncflow.task_types y where y.task_type = any (v_names));
  if cardinality(v_names) = 1 and cardinality(v_types) = 1 then
    -- the usual batch: one type; the function's rows come in report order
    return query execute format('select task_id, accepted, status, lease_until from asyncflow.%I('
      '$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)', 'type_report__' || v_types[1])
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now;
  else
    -- checked here too: a batch with no known type calls no type function
    perform asyncflow.check_report_arrays(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results,
      p_errors, p_retries, p_delays);
    return query execute 'select task_id, accepted, status, lease_until from ('
      || (select coalesce(string_agg(format('select * from asyncflow.%I($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) '
            'union all ', 'type_report__' || t), ''), '') from unnest(v_types) t)
      || 'select u.n, u.task_id, false, null::asyncflow.task_status, null::timestamptz '
      || 'from unnest($2) with ordinality u(task_id, n) where split_part(u.task_id, ''-'', 1) <> all ($12)) x order by n'
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now, v_types;
  end if;
end
$$;

-- The workflow trigger (V11): a success's trace takes its outcome from the status.
create or replace function asyncflow.tg_tasks__workflow() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_task_id text := asyncflow.format_task_id(new.task_type, new.shard, new.id);
  v_entry jsonb := new.schedule_log -> -1;
begin
  if old.status = 'running' then
    insert into asyncflow.run_traces (day, run_id, event_id, segment_id, task_id, stage, attempt, worker, outcome,
      request, response, error, started_at, cost_ms, created_at)
    values (asyncflow.run_day(new.run_ref), left(new.run_ref, 42), split_part(new.run_ref, '#', 1),
      case when new.run_ref like '%#%' then replace(new.run_ref, '#', '_') end, v_task_id, old.stage, old.attempt,
      -- a success writes no log entry (V19): its outcome is the status
      old.owner, coalesce(case when new.status = 'succeeded' then 'succeed' end, v_entry ->> 'outcome',
        v_entry ->> 'event'), old.context,
      case when new.status = 'succeeded' then new.result when new.stage <> old.stage then new.context end,
      case when new.status in ('pending', 'failed') and new.retry_count > old.retry_count then new.last_error end,
      old.claimed_at, floor(date_part('epoch', new.updated_at - old.claimed_at) * 1000)::bigint, new.updated_at);
  end if;
  if new.status in ('running', 'succeeded', 'failed', 'cancelled') then
    begin
      perform asyncflow.wf_task_changed(new.run_ref, v_task_id, new.status, new.result, new.last_error, new.updated_at);
    exception
      when deadlock_detected or serialization_failure or lock_not_available or query_canceled then
        raise;
      when others then
        perform asyncflow.wf_finish_run(left(new.run_ref, 42), 'failed', null,
          format('internal error moving the run on after task %s: %s (SQLSTATE %s)', v_task_id, sqlerrm, sqlstate),
          new.updated_at);
    end;
  end if;
  return null;
end
$$;
