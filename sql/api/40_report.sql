-- Reports (fenced by claim_seq), cancel and retry.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- cancel_task: a pending, running or waiting task becomes cancelled (a waiting task's wait ends;
-- a task waiting for its children cancels the unfinished ones). A running task's worker is told on
-- the channel asyncflow_cancel ('<task id> <claim_seq>') and stops the call; its report, if one
-- still comes, is refused. Returns true when cancelled, false when the task had already ended.
create or replace function asyncflow.cancel_task(task_id text, p_now timestamptz default null) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  p_task_id alias for $1;
  v_key record;
  v_now timestamptz := asyncflow.check_now(p_now);
  v_was asyncflow.task_status;
  v_claim_seq bigint;
  v_parent_id text;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
  -- a parent's join first, as a child's end takes it (its count) before the parent's row (the
  -- join): never the other way round (46_children.sql)
  perform 1 from asyncflow.joins j where j.task_type = v_key.task_type and j.shard = v_key.shard and j.id = v_key.id
  for update;
  select status, claim_seq, parent_id into v_was, v_claim_seq, v_parent_id from asyncflow.tasks
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id
    and status in ('pending', 'running', 'waiting')
  for update;
  if found then
    update asyncflow.tasks set status = 'cancelled', owner = null, lease_until = null, finished_at = v_now,
      updated_at = v_now,
      schedule_log = asyncflow.append_log(schedule_log, jsonb_build_object('event', 'cancelled', 'at', v_now))
    where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id;
    insert into asyncflow.status_deltas (task_type, in_pending, in_running, in_waiting, in_cancelled)
    values (v_key.task_type, -(v_was = 'pending')::integer, -(v_was = 'running')::integer,
      -(v_was = 'waiting')::integer, 1);
    if v_was = 'waiting' then
      delete from asyncflow.waits where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id;
      -- a parent waiting for its children: they are cancelled too (46_children.sql)
      perform asyncflow.cancel_children(v_key.task_type, v_key.shard, v_key.id, v_now);
    end if;
    -- a child's end counts on its parent's join
    if v_parent_id is not null then
      perform asyncflow.count_child_ends(array[v_parent_id]);
    end if;
    perform asyncflow.notify_waiters(v_key.task_type, array[v_key.shard], array[v_key.id]);
    -- a running call stops at once: its worker listens on asyncflow_cancel (at commit)
    if v_was = 'running' then
      perform pg_notify('asyncflow_cancel',
        asyncflow.format_task_id(v_key.task_type, v_key.shard, v_key.id) || ' ' || v_claim_seq);
    end if;
    return true;
  end if;
  perform asyncflow.check_task_exists(v_key.task_type, v_key.shard, v_key.id, p_task_id);
  return false;
end
$$;

-- retry_task: a failed or cancelled task runs again by hand: it becomes pending (attempt 0) in its
-- own, possibly old, shard, which reopens, and begin_pos is lowered to that shard. A task that
-- works for a workflow node is refused (AF013: retry the node). Returns true when retried, false
-- when the task had not ended failed or cancelled.
--
-- Locks: the type's positions row FOR KEY SHARE, always and first. Without it, an
-- advance_begin_pos pass running before the retry commits does not see the task (MVCC), finds
-- the shard dead, closes it and moves begin_pos past it, and the retry commits a pending task
-- below begin_pos, which no claim reads until a later pass moves begin_pos back. KEY SHARE
-- conflicts with the FOR UPDATE of advance_begin_pos and roll_shard, and not with another
-- retry's KEY SHARE or its UPDATE of begin_pos (a non-key column), so two retries never deadlock
-- on it. The lock lasts until the application commits: advance_begin_pos and roll_shard
-- therefore take the positions row under a 1 s lock_timeout and, when it is busy, change nothing
-- and say so (advance_begin_pos returns begin_pos as it is, roll_shard null), so the pass tries
-- again next time instead of holding the maintenance loop, and every other type, behind one
-- application's open transaction.
create or replace function asyncflow.retry_task(task_id text, p_now timestamp with time zone default null::timestamp with time zone) returns boolean
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $_$
declare
  p_task_id alias for $1;
  v_key record;
  v_now timestamptz := asyncflow.check_now(p_now);
  v_ref text;
  v_was asyncflow.task_status;
  v_parent_id text;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
  -- before the task turns pending: a begin_pos pass waits for this transaction, or this
  -- one for the pass, and whichever runs second sees what the first did
  perform 1 from asyncflow.positions where task_type = v_key.task_type for key share;
  -- locked here, so the status counted below is the one the update changes
  select run_ref, status, parent_id into v_ref, v_was, v_parent_id from asyncflow.tasks
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id
  for update;
  if v_ref is not null then
    raise exception using errcode = 'AF013', message = format(
      'task %s works for node %s of workflow run %s: retry the node (asyncflow.retry_node(%L, %L)) to resume the run',
      p_task_id, substr(split_part(v_ref, '#', 1), 44), left(v_ref, 42), left(v_ref, 42),
      substr(split_part(v_ref, '#', 1), 44));
  end if;
  update asyncflow.tasks set status = 'pending', attempt = 0, owner = null, lease_until = null, result = null,
    finished_at = null, order_time = v_now - make_interval(secs => priority), updated_at = v_now,
    schedule_log = asyncflow.append_log(schedule_log, jsonb_build_object('event', 'retried by hand', 'at', v_now))
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id and status in ('failed', 'cancelled');
  if not found then
    perform asyncflow.check_task_exists(v_key.task_type, v_key.shard, v_key.id, p_task_id);
    return false;
  end if;
  insert into asyncflow.status_deltas (task_type, in_pending, in_failed, in_cancelled)
  values (v_key.task_type, 1, -(v_was = 'failed')::integer, -(v_was = 'cancelled')::integer);
  -- a child live again no longer counts as ended on its parent's join (46_children.sql)
  if v_parent_id is not null then
    perform asyncflow.uncount_child_end(v_parent_id);
  end if;
  update asyncflow.positions set begin_pos = v_key.shard, updated_at = v_now
  where task_type = v_key.task_type and begin_pos > v_key.shard;
  -- its own shard reopens; the shards between it and begin_pos stay as they are (each is
  -- closed or open by what it holds)
  update asyncflow.shards set closed_at = null
  where task_type = v_key.task_type and shard = v_key.shard and closed_at is not null;
  perform asyncflow.wake(v_key.task_type);
  return true;
end
$_$;

-- report_tasks: the JSON form of report_task_arrays (for SQL callers); a report's progress is
-- its `progress` key, with any outcome (a heartbeat's `context`, the older spelling, too). Its JSON is checked, then its fields go to report_task_arrays in one pass of
-- jsonb_to_recordset. It refuses a delay outside 0 .. 31536000 s by itself, with
-- report_task_arrays' message, and reads it as numeric, to the microsecond: a JSON number beyond
-- a double precision's range (1e400, -1e400, and 1e-400, which underflows) would fail a double
-- precision cast in jsonb_to_recordset with a raw 22003 instead of AF006 naming the report.
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
      when jsonb_typeof(e -> 'claim_seq') is distinct from 'number' or (e ->> 'claim_seq') !~ '^-?[0-9]{1,18}$'
        then format('claim_seq must be an integer, got %s', e -> 'claim_seq')
      when jsonb_typeof(e -> 'outcome') is distinct from 'string'
        then format('outcome must be one of advance, succeed, fail, later, wait, spawn, release, heartbeat, got %s', e -> 'outcome')
      when jsonb_typeof(e -> 'delay') not in ('number', 'null') then 'delay must be a number of seconds'
      -- in numeric, which holds any JSON number: the double precision cast below cannot
      when (e ->> 'delay')::numeric not between 0 and 31536000
        then format('delay must be a number of seconds between 0 and 31536000, got %s', e -> 'delay')
      when jsonb_typeof(e -> 'error') not in ('string', 'null') then 'error must be a string'
      when jsonb_typeof(e -> 'stage') not in ('string', 'null') then 'stage must be a string'
      when jsonb_typeof(e -> 'event') not in ('string', 'null') then 'event must be a string'
      when jsonb_typeof(e -> 'timeout') not in ('number', 'null') then 'timeout must be a number of seconds'
      when (e ->> 'timeout')::numeric not between 0 and 31536000
        then format('timeout must be a number of seconds above 0 and at most 31536000, got %s', e -> 'timeout')
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
    array_agg(case when x.outcome = 'heartbeat' then null else x.context end) as contexts,
    -- a spawn's list travels in the results array
    array_agg(case when x.outcome = 'spawn' then x.spawn else x.result end) as results,
    -- a wait's event key and timeout travel in the error and delay arrays
    array_agg(case when x.outcome = 'wait' then x.event else x.error end) as errors, array_agg(x.retry) as retries,
    array_agg(round(case when x.outcome = 'wait' then x.timeout else x.delay end, 6)::double precision) as delays,
    -- a heartbeat's context is its progress too (the older spelling)
    array_agg(coalesce(nullif(x.progress, 'null'),
      case when x.outcome = 'heartbeat' then nullif(x.context, 'null') end)) as progress
  into v
  from rows from (jsonb_to_recordset(p_reports) as (task_id text, claim_seq bigint, outcome text, stage text,
    context jsonb, result jsonb, error text, retry boolean, delay numeric, progress jsonb, event text,
    timeout numeric, spawn jsonb))
    with ordinality as x(task_id, claim_seq, outcome, stage, context, result, error, retry, delay, progress, event,
      timeout, spawn, n);
  return query select * from asyncflow.report_task_arrays(p_owner, coalesce(v.task_ids, '{}'),
    coalesce(v.claim_seqs, '{}'), coalesce(v.outcomes, '{}'), v.stages, v.contexts, v.results, v.errors, v.retries,
    v.delays, p_now, v.progress);
end
$$;

-- report_task_arrays: the reports of one worker, element k of every array describing report k
-- (fields and outcomes as in report_tasks; p_stages, p_contexts, p_results, p_errors, p_retries,
-- p_delays and p_progress may be null as a whole or per element; p_progress, last so that calls
-- without it keep their meaning, is each report's progress, with any outcome). A wait (outcome
-- 'wait', the reply {"wait": {"event", "timeout"}, "next_stage"}) carries its next stage in
-- p_stages, its event key in p_errors and its timeout in seconds in p_delays; in report_tasks it
-- is {"outcome": "wait", "stage", "event", "timeout", "context"}. A spawn (outcome 'spawn', the
-- reply {"spawn": [...], "next_stage"}) carries its next stage in p_stages and its list of
-- children in p_results; in report_tasks it is {"outcome": "spawn", "stage", "spawn", "context"}. Each type's report function applies that
-- type's reports; the answers of reports of no known type are named columns, also when no type's
-- function is called.
create or replace function asyncflow.report_task_arrays(
  p_owner text,
  p_task_ids text[],
  p_claim_seqs bigint[],
  p_outcomes text[],
  p_stages text[] default null,
  p_contexts jsonb[] default null,
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_retries boolean[] default null,
  p_delays double precision[] default null,
  p_now timestamptz default null,
  p_progress jsonb[] default null
)
returns table (task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
language plpgsql security definer set search_path = pg_catalog, pg_temp
-- one primary-key probe per report, never a scan (see claim_tasks); the type's report function
-- sets the same for its own statement
set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
  v_now timestamptz := asyncflow.check_now(p_now);
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
      '$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)', 'type_report__' || v_types[1])
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now, p_progress;
  else
    -- checked here too: a batch with no known type calls no type function
    perform asyncflow.check_report_arrays(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results,
      p_errors, p_retries, p_delays, p_progress);
    return query execute 'select task_id, accepted, status, lease_until from ('
      || (select coalesce(string_agg(format('select * from asyncflow.%I($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) '
            'union all ', 'type_report__' || t), ''), '') from unnest(v_types) t)
      || 'select u.n, u.task_id, false as accepted, null::asyncflow.task_status as status, null::timestamptz as lease_until '
      || 'from unnest($2) with ordinality u(task_id, n) where split_part(u.task_id, ''-'', 1) <> all ($13)) x order by n'
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now, p_progress, v_types;
  end if;
end
$$;

-- The checks of a batch of reports (report_task_arrays', shared with each type's report
-- function, which the worker calls directly): AF006 naming the first bad report and field,
-- nothing applied.
create or replace function asyncflow.check_report_arrays(p_task_ids text[], p_claim_seqs bigint[], p_outcomes text[],
  p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[],
  p_delays double precision[], p_progress jsonb[]) returns void
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
    or coalesce(cardinality(p_progress), v_n) <> v_n or coalesce(array_ndims(p_progress), 1) <> 1
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
      when x.outcome is null or x.outcome not in ('advance', 'succeed', 'fail', 'later', 'wait', 'spawn', 'release', 'heartbeat')
        then format('outcome must be one of advance, succeed, fail, later, wait, spawn, release, heartbeat, got %s',
          coalesce(to_jsonb(x.outcome), 'null'))
      when x.outcome in ('advance', 'wait', 'spawn') and not asyncflow.stage_ok(x.stage)
        then format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', coalesce(to_jsonb(x.stage), 'null'))
      when x.outcome = 'wait' and asyncflow.event_key_problem(x.error) is not null
        then asyncflow.event_key_problem(x.error)
      when x.outcome = 'wait' and (x.delay is null or x.delay = 'NaN' or not (x.delay > 0 and x.delay <= 31536000))
        then format('timeout must be a number of seconds above 0 and at most 31536000, got %s',
          coalesce(x.delay::text, 'null'))
      when x.outcome in ('advance', 'later', 'wait', 'spawn') and jsonb_typeof(x.context) not in ('object', 'null')
        then 'context must be a JSON object'
      -- a spawn's list travels in the results array (46_children.sql)
      when x.outcome = 'spawn' and pg_column_size(x.result) > v_max_bytes
        then format('spawn is too large: %s bytes, the limit is %s', pg_column_size(x.result), v_max_bytes)
      when x.outcome = 'spawn' and asyncflow.spawn_problem(x.result) is not null then asyncflow.spawn_problem(x.result)
      when asyncflow.progress_too_large(x.progress) is not null then asyncflow.progress_too_large(x.progress)
      when pg_column_size(x.context) > v_max_bytes
        then format('context is too large: %s bytes, the limit is %s', pg_column_size(x.context), v_max_bytes)
      when pg_column_size(x.result) > v_max_bytes
        then format('result is too large: %s bytes, the limit is %s', pg_column_size(x.result), v_max_bytes)
      -- the JSON rule; '.<field>: ...' names the field after the report: reports[3].context: ...
      when not asyncflow.json_ok(x.context) then format('.context: %s', asyncflow.json_problem(x.context))
      when not asyncflow.json_ok(x.result) then format('.result: %s', asyncflow.json_problem(x.result))
      when not asyncflow.json_ok(x.progress) then format('.progress: %s', asyncflow.json_problem(x.progress))
      when x.outcome = 'later' and (x.delay is null or x.delay = 'NaN' or x.delay not between 0 and 31536000)
        then format('delay must be a number of seconds between 0 and 31536000, got %s', coalesce(x.delay::text, 'null'))
    end as problem
    from unnest(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_delays, p_progress, p_errors)
      with ordinality as x(task_id, claim_seq, outcome, stage, context, result, delay, progress, error, n)
  ) checked where problem is not null order by n limit 1;
  if found then
    perform asyncflow.raise_error('AF006', case when v_bad.problem like '.%'
      then format('reports[%s]%s', v_bad.n - 1, v_bad.problem)
      else format('reports[%s]: %s', v_bad.n - 1, v_bad.problem) end);
  end if;
end
$$;
