-- Reports as typed arrays: report_task_arrays takes one array per field (what the worker sends),
-- so a batch no longer goes through JSON text, a JSON parse and a check of every key of every
-- report: on this machine that was about a fifth of a batch of 1,000 successes. It holds the one
-- implementation of a report; report_tasks (the JSON form, for SQL callers and the HTTP worker
-- protocol) checks its JSON as before and hands the fields over as arrays.

-- report_task_arrays: the reports of one worker, element k of every array describing report k
-- (fields and outcomes as in report_tasks; p_stages, p_contexts, p_results, p_errors, p_retries
-- and p_delays may be null as a whole or per element). Same checks, errors (AF006 naming
-- reports[k]), effects and result as report_tasks.
create function asyncflow.report_task_arrays(
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
-- one primary-key probe per report, never a scan (see claim_tasks)
set enable_seqscan = off set jit = off as $$
#variable_conflict use_column
declare
  v_now timestamptz := coalesce(p_now, now());
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

  return query
  with r as (
    -- one pass of unnest over the typed arrays; ids are split inline (a lateral call to
    -- parse_task_id is not inlined and cost more than the update)
    select x.n, x.task_id, split_part(x.task_id, '-', 1) as task_type,
      split_part(x.task_id, '-', 2)::integer as shard, split_part(x.task_id, '-', 3)::bigint as id,
      x.claim_seq, x.outcome, x.stage, nullif(x.context, 'null'::jsonb) as context, x.result,
      left(x.error, 256) as error, coalesce(x.retry, true) as retry, x.delay
    from unnest(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries, p_delays)
      with ordinality as x(task_id, claim_seq, outcome, stage, context, result, error, retry, delay, n)
  ), changed as (
    update asyncflow.tasks t set
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
    from (select distinct on (task_type, shard, id) * from r order by task_type, shard, id, n desc) r
    where t.task_type = r.task_type and t.shard = r.shard and t.id = r.id
      -- status compared as text: the partial index on running tasks must not look like a way
      -- in (the planner would walk every running task for each report)
      and t.status::text = 'running' and t.owner = p_owner and t.claim_seq = r.claim_seq
    returning r.n, t.status, t.lease_until, t.task_type, r.outcome, t.schedule_log -> -1 as entry
  ), counted as (
    insert into asyncflow.type_counters as k (task_type, slot, succeeded, failed, retried)
    select c.task_type, pg_backend_pid() % 16, count(*) filter (where c.status = 'succeeded'),
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
    select t.task_type, t.stage, pg_backend_pid() % 16, sum(coalesce(g.n, 0)), sum(coalesce(g.secs, 0)),
      array_agg(coalesce(g.n, 0) order by x.k)
    from (select distinct task_type, stage from per_bucket) t
    cross join generate_series(0, cardinality(asyncflow.stage_time_bounds())) x(k)
    left join per_bucket g on g.task_type = t.task_type and g.stage = t.stage and g.k = x.k
    group by t.task_type, t.stage
    on conflict (task_type, stage, slot) do update set calls = s.calls + excluded.calls,
      seconds = s.seconds + excluded.seconds,
      buckets = array(select a + b from unnest(s.buckets, excluded.buckets) with ordinality u(a, b, i) order by i)
  )
  select r.task_id, c.n is not null,
    -- the current status is looked up only for refused reports
    case when c.n is null then (select s.status from asyncflow.tasks s
      where s.task_type = r.task_type and s.shard = r.shard and s.id = r.id) else c.status end,
    c.lease_until
  from r
  left join changed c on c.n = r.n
  order by r.n;

  -- Tasks that went back to pending are ready for any worker of the type (one NOTIFY per type).
  perform asyncflow.wake(y.task_type)
  from (select distinct split_part(u.task_id, '-', 1) as task_type
        from unnest(p_task_ids, p_outcomes) u(task_id, outcome)
        where u.outcome in ('advance', 'release', 'fail', 'later')) y;
end
$$;

-- report_tasks: the JSON form (see V15 for the fields). Its JSON is checked as before, then its
-- fields go to report_task_arrays in one pass of jsonb_to_recordset.
create or replace function asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamptz default null)
returns table (task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
#variable_conflict use_column
declare
  v_bad record;
  v record;
begin
  if p_reports is null or jsonb_typeof(p_reports) <> 'array' then
    perform asyncflow.raise_error('AF006', 'reports must be a JSON array of objects');
  end if;
  -- Only what the typed fields need here (each field of its JSON type, claim_seq an integer);
  -- report_task_arrays checks the values, with the same messages.
  select n, problem into v_bad from (
    select n, case
      when jsonb_typeof(e) <> 'object' then 'must be a JSON object'
      when jsonb_typeof(e -> 'task_id') is distinct from 'string' then 'task_id must be a string'
      when jsonb_typeof(e -> 'claim_seq') is distinct from 'number' or (e ->> 'claim_seq') !~ '^-?[0-9]{1,9}$'
        then format('claim_seq must be an integer, got %s', e -> 'claim_seq')
      when jsonb_typeof(e -> 'outcome') is distinct from 'string'
        then format('outcome must be one of advance, succeed, fail, later, release, heartbeat, got %s', e -> 'outcome')
      when jsonb_typeof(e -> 'delay') not in ('number', 'null') then 'delay must be a number of seconds'
      when jsonb_typeof(e -> 'error') not in ('string', 'null') then 'error must be a string'
      when jsonb_typeof(e -> 'stage') not in ('string', 'null') then 'stage must be a string'
      when jsonb_typeof(e -> 'retry') not in ('boolean', 'null') then 'retry must be true or false'
    end as problem
    from jsonb_array_elements(p_reports) with ordinality x(e, n)
  ) checked where problem is not null order by n limit 1;
  if found then
    perform asyncflow.raise_error('AF006', format('reports[%s]: %s', v_bad.n - 1, v_bad.problem));
  end if;

  -- one plain aggregate over the ordered scan: the arrays keep the reports' order
  select array_agg(x.task_id) as task_ids, array_agg(x.claim_seq) as claim_seqs,
    array_agg(x.outcome) as outcomes, array_agg(x.stage) as stages,
    array_agg(x.context) as contexts, array_agg(x.result) as results,
    array_agg(x.error) as errors, array_agg(x.retry) as retries,
    array_agg(x.delay) as delays
  into v
  from rows from (jsonb_to_recordset(p_reports) as (task_id text, claim_seq integer, outcome text, stage text,
    context jsonb, result jsonb, error text, retry boolean, delay double precision))
    with ordinality as x(task_id, claim_seq, outcome, stage, context, result, error, retry, delay, n);
  return query select * from asyncflow.report_task_arrays(p_owner, coalesce(v.task_ids, '{}'),
    coalesce(v.claim_seqs, '{}'), coalesce(v.outcomes, '{}'), v.stages, v.contexts, v.results, v.errors, v.retries,
    v.delays, p_now);
end
$$;

revoke all on function asyncflow.report_task_arrays(text, text[], integer[], text[], text[], jsonb[], jsonb[], text[],
  boolean[], double precision[], timestamptz) from public;
grant execute on function asyncflow.report_task_arrays(text, text[], integer[], text[], text[], jsonb[], jsonb[], text[],
  boolean[], double precision[], timestamptz) to asyncflow_worker;
