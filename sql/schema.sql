-- Snapshot of the schema after every migration (generated; never executed).
-- Regenerate: UPDATE_SCHEMA=1 cargo test --test schema_snapshot
-- Dumped by pg_dump from PostgreSQL 15.

CREATE SCHEMA asyncflow;

CREATE TYPE asyncflow.claimed_task AS (
	task_id text,
	task_type text,
	stage text,
	context jsonb,
	priority integer,
	attempt integer,
	claim_seq integer,
	user_id text,
	lease_until timestamp with time zone,
	claimed_at timestamp with time zone
);

CREATE TYPE asyncflow.held_task AS (
	task_id text,
	task_type text,
	stage text,
	context jsonb,
	priority integer,
	attempt integer,
	claim_seq integer,
	user_id text,
	lease_until timestamp with time zone,
	claimed_at timestamp with time zone,
	held boolean
);

CREATE TYPE asyncflow.run_status AS ENUM (
    'scheduled',
    'running',
    'succeeded',
    'failed',
    'timed_out',
    'cancelled'
);

CREATE TYPE asyncflow.task_status AS ENUM (
    'pending',
    'running',
    'succeeded',
    'failed',
    'cancelled'
);

CREATE FUNCTION asyncflow.advance_begin_pos(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_pos asyncflow.positions;
  v_shard integer;
  v_begin integer;
  v_live integer[] := '{}';
  v_lock_timeout text := current_setting('lock_timeout');
begin
  -- (V40) a retry_task holds this row until its transaction ends: past 1 s, this pass changes
  -- nothing and the next one tries again
  begin
    perform set_config('lock_timeout', '1s', true);
    select * into v_pos from asyncflow.positions where task_type = p_task_type for update;
    perform set_config('lock_timeout', v_lock_timeout, true);
  exception when lock_not_available then
    perform set_config('lock_timeout', v_lock_timeout, true);
    return (select begin_pos from asyncflow.positions where task_type = p_task_type);
  end;
  if v_pos.task_type is null then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  -- (V34) every undropped shard below the end one is looked at, not only those below the first
  -- live one: a shard with no live task is closed (its retention counts from then) wherever it
  -- lies, so one long-delayed task keeps its own shard, not every newer one, from being dropped
  v_begin := v_pos.end_pos;
  for v_shard in
    select shard from asyncflow.shards
    where task_type = p_task_type and dropped_at is null and shard < v_pos.end_pos order by shard
  loop
    if asyncflow.shard_is_live(p_task_type, v_shard) then
      v_begin := least(v_begin, v_shard);
      v_live := v_live || v_shard;
    end if;
  end loop;
  update asyncflow.shards set closed_at = v_now
  where task_type = p_task_type and shard < v_pos.end_pos and not shard = any (v_live)
    and closed_at is null and dropped_at is null;
  update asyncflow.shards set closed_at = null
  where task_type = p_task_type and (shard = any (v_live) or shard >= v_pos.end_pos) and closed_at is not null;
  if v_begin <> v_pos.begin_pos then
    update asyncflow.positions set begin_pos = v_begin, updated_at = v_now where task_type = p_task_type;
  end if;
  return v_begin;
end
$$;

CREATE FUNCTION asyncflow.append_log(p_log jsonb, p_entry jsonb) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $_$
  -- each argument appears once (p_log is a column, cheap to repeat): otherwise the planner
  -- refuses to inline a call whose argument is an expression
  select case when jsonb_array_length(p_log) < 20 then p_log
    else jsonb_path_query_array(p_log, '$[last - 18 to last]') end || jsonb_build_array(p_entry)
$_$;

CREATE FUNCTION asyncflow.cancel_run(run_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
#variable_conflict use_column
declare
  v_run asyncflow.runs;
begin
  for v_try in 1..3 loop
    begin
      v_run := asyncflow.wf_run_for_update($1);
      if v_run.status not in ('scheduled', 'running') then
        return false;
      end if;
      perform asyncflow.wf_finish_run(v_run.run_id, 'cancelled', null, 'cancelled by hand', coalesce(p_now, now()));
      return true;
    exception when deadlock_detected then
      -- in REPEATABLE READ or SERIALIZABLE a try after a concurrent change cannot succeed
      if v_try = 3 or current_setting('transaction_isolation') <> 'read committed' then
        raise;
      end if;
      -- let the report that was waiting take the locks and finish first: trying again at once
      -- would lock the run before it and meet it again
      perform pg_sleep(0.05 * v_try);
    end;
  end loop;
  return false;
end
$_$;

CREATE FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  p_task_id alias for $1;
  v_key record;
  v_now timestamptz := coalesce(p_now, now());
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
  update asyncflow.tasks set status = 'cancelled', owner = null, lease_until = null, finished_at = v_now,
    updated_at = v_now,
    schedule_log = asyncflow.append_log(schedule_log, jsonb_build_object('event', 'cancelled', 'at', v_now))
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id and status in ('pending', 'running');
  if found then
    return true;
  end if;
  perform asyncflow.check_task_exists(v_key.task_type, v_key.shard, v_key.id, p_task_id);
  return false;
end
$_$;

CREATE FUNCTION asyncflow.check_new_type_name(p_task_type text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $_$
declare
  -- the ends of the names a type's objects add to tasks_<type>
  v_owned constant text := '_([0-9]+|id_seq|pkey|ready|running)$';
  v_other text;
begin
  perform asyncflow.check_type_name(p_task_type);
  if p_task_type ~ v_owned then
    perform asyncflow.raise_error('AF003', format(
      'invalid task type name %L: a name may not end in _<digits>, _id_seq, _pkey, _ready or _running '
      '(the names of a type''s shards, sequence and indexes)', p_task_type));
  end if;
  select y.task_type into v_other from asyncflow.task_types y
  where y.task_type ~ ('^' || p_task_type || v_owned) limit 1;
  if found then
    perform asyncflow.raise_error('AF003', format(
      'invalid task type name %L: its shards and indexes would take the names of type %L', p_task_type, v_other));
  end if;
end
$_$;

CREATE FUNCTION asyncflow.check_report_arrays(p_task_ids text[], p_claim_seqs integer[], p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[], p_delays double precision[]) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.check_runs(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 500) RETURNS TABLE(action text, id text, detail text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_run asyncflow.runs;
  v_event asyncflow.run_events;
  v_seg asyncflow.run_segments;
  v_def jsonb;
  v_new text;
  v_plan jsonb;
  v_why text;
  v_done boolean;
begin
  perform asyncflow.ensure_run_day((v_now at time zone 'UTC')::date);
  perform asyncflow.ensure_run_day((v_now at time zone 'UTC')::date + 1);

  for v_run in
    select * from asyncflow.runs r where r.status = 'scheduled' and r.run_at <= v_now
    order by r.run_at limit p_limit for update skip locked
  loop
    id := v_run.run_id;
    begin
      perform asyncflow.wf_begin_run(v_run.run_id, v_now);
      action := 'begun'; detail := format('due at %s', v_run.run_at);
    exception when others then
      get stacked diagnostics v_why = message_text;
      perform asyncflow.wf_finish_run(v_run.run_id, 'failed', null, format('could not begin: %s', v_why), v_now);
      action := 'run failed'; detail := v_why;
    end;
    return next;
  end loop;

  for v_event in
    select * from asyncflow.run_events e
    where e.status in ('pending', 'running', 'external') and e.deadline < v_now and e.node_type <> 'dynamic'
    order by e.deadline limit p_limit for update skip locked
  loop
    v_run := asyncflow.wf_get_run(v_event.run_id);
    v_def := asyncflow.wf_plan(v_run) -> 'nodes' -> v_event.node;
    id := v_event.event_id;
    v_done := false;
    v_why := null;
    if v_event.node_type = 'task' and v_def ->> 'function' is not null
        and v_event.exec_cnt <= coalesce((v_def ->> 'timeout_retries')::integer, 0) then
      begin
        update asyncflow.run_events set task_id = null where day = v_event.day and event_id = v_event.event_id;
        perform asyncflow.wf_cancel_task(v_event.task_id, v_now);
        perform asyncflow.wf_activate(v_run, v_event.node, v_now);
        v_done := true;
      exception when others then
        get stacked diagnostics v_why = message_text;
      end;
    end if;
    if v_done then
      action := 'node restarted';
      detail := format('no result within %s s; try %s', v_def ->> 'timeout', v_event.exec_cnt + 1);
    else
      perform asyncflow.wf_fail_event(v_event.event_id,
        format('timed out: no result within %s s (%s tries)', v_def ->> 'timeout', v_event.exec_cnt)
          || coalesce('; the restart failed: ' || v_why, ''), v_now);
      action := 'node failed';
      detail := format('no result within %s s', v_def ->> 'timeout') || coalesce('; restart failed: ' || v_why, '');
    end if;
    return next;
  end loop;

  for v_seg in
    select * from asyncflow.run_segments s where s.status in ('pending', 'running') and s.deadline < v_now
    order by s.deadline limit p_limit for update skip locked
  loop
    v_run := asyncflow.wf_get_run(v_seg.run_id);
    v_event := (select e from asyncflow.run_events e where e.day = v_seg.day and e.event_id = v_seg.event_id);
    v_def := asyncflow.wf_plan(v_run) -> 'nodes' -> v_event.node;
    id := v_seg.segment_id;
    v_done := false;
    v_why := null;
    if v_seg.exec_cnt <= coalesce((v_def ->> 'timeout_retries')::integer, 0) then
      begin
        update asyncflow.run_segments set task_id = null where day = v_seg.day and segment_id = v_seg.segment_id;
        perform asyncflow.wf_cancel_task(v_seg.task_id, v_now);
        perform asyncflow.wf_start_segments(v_run, v_event.node, v_def, asyncflow.wf_inputs(v_run, v_def),
          array[v_seg.n], array[v_seg.item], v_event.segment_cnt, v_now);
        v_done := true;
      exception when others then
        get stacked diagnostics v_why = message_text;
      end;
    end if;
    if v_done then
      action := 'segment restarted';
      detail := format('no result within %s s; try %s', v_def ->> 'timeout', v_seg.exec_cnt + 1);
    else
      perform asyncflow.wf_fail_event(v_seg.event_id,
        format('segment %s timed out: no result within %s s (%s tries)', v_seg.n, v_def ->> 'timeout', v_seg.exec_cnt)
          || coalesce('; the restart failed: ' || v_why, ''), v_now);
      action := 'node failed';
      detail := format('segment %s: no result within %s s', v_seg.n, v_def ->> 'timeout')
        || coalesce('; restart failed: ' || v_why, '');
    end if;
    return next;
  end loop;

  for v_run in
    select * from asyncflow.runs r where r.status = 'running' and r.deadline < v_now
    order by r.deadline limit p_limit for update skip locked
  loop
    v_plan := asyncflow.wf_plan(v_run);
    id := v_run.run_id;
    v_new := null;
    v_why := null;
    if v_run.parent_event is null and v_run.attempt <= (v_plan ->> 'retries')::integer then
      begin
        v_new := asyncflow.wf_new_run(v_run.pipeline, v_run.version, v_run.input, v_run.notify_url, v_run.notify_key,
          null, null, 0, v_run.attempt + 1, v_run.run_id, v_now);
      exception when others then
        get stacked diagnostics v_why = message_text;
        v_new := null;
      end;
    end if;
    if v_new is not null then
      update asyncflow.runs set retried_by = v_new where day = v_run.day and run_id = v_run.run_id;
      perform asyncflow.wf_finish_run(v_run.run_id, 'timed_out', null,
        format('no end within %s s; retried as %s', v_plan ->> 'timeout', v_new), v_now, false);
      action := 'run retried';
      detail := v_new;
    else
      perform asyncflow.wf_finish_run(v_run.run_id, 'timed_out', null,
        format('no end within %s s (deadline %s)', v_plan ->> 'timeout', v_run.deadline)
          || coalesce('; not retried: ' || v_why, ''), v_now);
      action := 'run timed out';
      detail := format('deadline %s', v_run.deadline) || coalesce('; not retried: ' || v_why, '');
    end if;
    return next;
  end loop;
end
$$;

CREATE FUNCTION asyncflow.check_settings(p_settings jsonb) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
declare
  v_key text;
  v_val jsonb;
  v_spec record;
  v_num numeric;
begin
  if p_settings is null or jsonb_typeof(p_settings) <> 'object' then
    perform asyncflow.raise_error('AF006', 'settings must be a JSON object');
  end if;
  for v_key, v_val in select key, value from jsonb_each(p_settings) loop
    select * into v_spec from (values
      ('schedule_limit', 'int', 1::numeric, 10000::numeric),
      ('schedule_interval', 'number', 0.01, 86400),
      ('max_processing_time', 'int', 1, 31536000),
      ('max_retry_num', 'int', 0, 1000),
      ('max_retry_interval', 'int', -31536000, 31536000),
      ('shard_max_rows', 'int', 10, 1000000000000),
      ('retention', 'int', 0, 315360000),
      ('concurrency', 'int_or_null', 1, 1000000),
      ('initial_stage', 'stage', null, null),
      ('paused', 'bool', null, null),
      ('fair_queues', 'bool', null, null),
      ('queue_concurrency', 'int_or_null', 1, 1000000)
    ) s(key, kind, lo, hi) where s.key = v_key;
    if not found then
      perform asyncflow.raise_error('AF006', format('unknown setting %L (known: schedule_limit, schedule_interval, '
        'max_processing_time, max_retry_num, max_retry_interval, shard_max_rows, retention, concurrency, '
        'initial_stage, paused, fair_queues, queue_concurrency)', v_key));
    end if;
    if v_spec.kind = 'int_or_null' and jsonb_typeof(v_val) = 'null' then
      continue;
    elsif v_spec.kind in ('int', 'int_or_null', 'number') then
      if jsonb_typeof(v_val) <> 'number' then
        perform asyncflow.raise_error('AF006', format('setting %s must be a number, got %s', v_key, v_val));
      end if;
      v_num := v_val::text::numeric;
      if (v_spec.kind <> 'number' and v_num <> trunc(v_num)) or v_num < v_spec.lo or v_num > v_spec.hi then
        perform asyncflow.raise_error('AF006', format('setting %s must be %s between %s and %s, got %s', v_key,
          case when v_spec.kind = 'number' then 'a number' else 'an integer' end, v_spec.lo, v_spec.hi, v_val));
      end if;
    elsif v_spec.kind = 'stage' then
      if jsonb_typeof(v_val) <> 'string' or v_val #>> '{}' !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
        perform asyncflow.raise_error('AF006', format('setting %s must be a stage name matching ^[A-Za-z0-9_.:/-]{1,64}$, got %s', v_key, v_val));
      end if;
    elsif v_spec.kind = 'bool' then
      if jsonb_typeof(v_val) <> 'boolean' then
        perform asyncflow.raise_error('AF006', format('setting %s must be true or false, got %s', v_key, v_val));
      end if;
    end if;
  end loop;
end
$_$;

CREATE FUNCTION asyncflow.check_task_exists(p_task_type text, p_shard integer, p_id bigint, p_task_id text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
begin
  perform 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and id = p_id;
  if not found then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
end
$$;

CREATE FUNCTION asyncflow.check_type_name(p_task_type text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
begin
  if p_task_type is null or p_task_type !~ '^[a-z][a-z0-9_]{0,39}$' then
    perform asyncflow.raise_error('AF003', format(
      'invalid task type name %s: it must match ^[a-z][a-z0-9_]{0,39}$', coalesce(quote_literal(p_task_type), 'null')));
  end if;
end
$_$;

CREATE FUNCTION asyncflow.claim_callbacks(p_owner text, p_limit integer, p_lease integer DEFAULT 60, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(callback_id text, run_id text, kind text, url text, payload jsonb, attempt integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_now timestamptz := coalesce(p_now, now());
begin
  return query
  with due as (
    select c.day, c.callback_id from asyncflow.callbacks c
    where c.status = 'pending' and c.next_attempt_at <= v_now
    order by c.next_attempt_at limit greatest(p_limit, 0) for update skip locked
  )
  update asyncflow.callbacks c set attempts = c.attempts + 1, owner = p_owner,
    next_attempt_at = v_now + make_interval(secs => greatest(p_lease, 1)), updated_at = v_now
  from due where c.day = due.day and c.callback_id = due.callback_id
  returning c.callback_id, c.run_id, c.kind, c.url, c.payload, c.attempts;
end
$$;

CREATE FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF asyncflow.claimed_task
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.compile_pipeline(p_name text, p_definition jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $_$
declare
  v_node jsonb;
  v_edge jsonb;
  v_name text;
  v_type text;
  v_key text;
  v_nodes jsonb;
  v_defs jsonb[] := '{}';
  v_types text[] := '{}';
  v_order text[] := '{}';
  v_start text;
  v_end text;
  v_allowed text[];
  -- nodes by number (their position in v_order, v_defs and v_types)
  v_n integer;
  v_number jsonb := '{}';
  -- edges in definition order, by node name and by node number
  v_e integer := 0;
  v_from text[] := '{}';
  v_to text[] := '{}';
  v_when text[] := '{}';
  v_fi integer[] := '{}';
  v_ti integer[] := '{}';
  v_live boolean[];
  v_dup integer;
  v_f text;
  v_t text;
  v_w text;
  -- edges grouped by node (graph_index)
  v_out integer[];
  v_out_at integer[];
  v_in integer[];
  v_in_at integer[];
  v_count integer[];
  v_seen boolean[];
  v_queue integer[];
  v_head integer;
  v_k integer;
  v_j integer;
  v_i integer;
  v_cycle text[];
  v_pruned jsonb := '[]';
  v_has_default boolean;
  v_plan jsonb;
  v_path text[];
begin
  -- Field types the casts below rely on (V20).
  if jsonb_typeof(p_definition -> 'retries') = 'number' and not asyncflow.is_integral(p_definition -> 'retries') then
    perform asyncflow.pipeline_error(format('retries must be an integer between 0 and 100, got %s', p_definition -> 'retries'));
  end if;
  if jsonb_typeof(p_definition -> 'nodes') = 'array' then
    for v_node in select e from jsonb_array_elements(p_definition -> 'nodes') e where jsonb_typeof(e) = 'object' loop
      foreach v_key in array array['priority', 'timeout_retries', 'max_segments', 'version'] loop
        if (v_key = 'version' and jsonb_typeof(v_node -> v_key) not in ('number', 'null'))
          or (jsonb_typeof(v_node -> v_key) = 'number' and not asyncflow.is_integral(v_node -> v_key)) then
          perform asyncflow.pipeline_error(format('node %L: %s must be an integer, got %s',
            v_node ->> 'name', v_key, v_node -> v_key));
        end if;
      end loop;
      if jsonb_typeof(v_node -> 'async') not in ('boolean', 'null') then
        perform asyncflow.pipeline_error(format('node %L: async must be true or false', v_node ->> 'name'));
      end if;
    end loop;
  end if;

  if p_definition is null or jsonb_typeof(p_definition) <> 'object' then
    perform asyncflow.pipeline_error('a pipeline definition must be a JSON object with nodes and edges');
  end if;
  select k into v_key from jsonb_object_keys(p_definition) k
  where k not in ('name', 'description', 'timeout', 'retries', 'nodes', 'edges') limit 1;
  if found then
    perform asyncflow.pipeline_error(format('unknown field %L (known: name, description, timeout, retries, nodes, edges)', v_key));
  end if;
  if p_definition ? 'name' and p_definition ->> 'name' is distinct from p_name then
    perform asyncflow.pipeline_error(format('the definition names pipeline %s, not %L', p_definition -> 'name', p_name));
  end if;
  if jsonb_typeof(p_definition -> 'timeout') not in ('number', 'null')
    or (p_definition ->> 'timeout')::numeric not between 1 and 31536000 then
    perform asyncflow.pipeline_error(format('timeout must be seconds between 1 and 31536000, got %s', p_definition -> 'timeout'));
  end if;
  if jsonb_typeof(p_definition -> 'retries') not in ('number', 'null')
    or (p_definition ->> 'retries')::numeric not between 0 and 100 then
    perform asyncflow.pipeline_error(format('retries must be an integer between 0 and 100, got %s', p_definition -> 'retries'));
  end if;
  if jsonb_typeof(p_definition -> 'nodes') is distinct from 'array' or jsonb_array_length(p_definition -> 'nodes') = 0 then
    perform asyncflow.pipeline_error('nodes must be a non-empty array of node objects');
  end if;
  if jsonb_array_length(p_definition -> 'nodes') > 500 then
    perform asyncflow.pipeline_error('a pipeline has at most 500 nodes');
  end if;
  if jsonb_typeof(p_definition -> 'edges') is distinct from 'array' then
    perform asyncflow.pipeline_error('edges must be an array of {"from", "to", "when"} objects or [from, to] pairs');
  end if;
  if jsonb_array_length(p_definition -> 'edges') > 5000 then
    perform asyncflow.pipeline_error('a pipeline has at most 5000 edges');
  end if;

  -- Nodes: names, types, fields.
  for v_node in select e from jsonb_array_elements(p_definition -> 'nodes') e loop
    if jsonb_typeof(v_node) <> 'object' or jsonb_typeof(v_node -> 'name') is distinct from 'string' then
      perform asyncflow.pipeline_error(format('every node must be an object with a name, got %s', v_node));
    end if;
    v_name := v_node ->> 'name';
    if v_name !~ '^[a-z][a-z0-9_]{0,39}$' then
      perform asyncflow.pipeline_error(format('node %L: a node name must match ^[a-z][a-z0-9_]{0,39}$', v_name));
    end if;
    if v_number ? v_name then
      perform asyncflow.pipeline_error(format('node %L: the name is used twice', v_name));
    end if;
    v_type := v_node ->> 'type';
    v_allowed := case v_type
      when 'start' then '{}'::text[]
      when 'end' then '{}'
      when 'parallel' then '{}'
      when 'router' then '{}'
      when 'task' then '{function,stage,priority,async,timeout,timeout_retries}'
      when 'dynamic' then '{function,stage,priority,items,max_segments,timeout,timeout_retries}'
      when 'pipeline' then '{pipeline,version,timeout}'
      when 'callback' then '{url}'
    end;
    if v_allowed is null then
      perform asyncflow.pipeline_error(format(
        'node %L: type must be one of start, end, task, dynamic, router, parallel, pipeline, callback, got %s',
        v_name, coalesce((v_node -> 'type')::text, 'nothing')));
    end if;
    select k into v_key from jsonb_object_keys(v_node) k
    where k not in ('name', 'type', 'description') and k <> all (v_allowed) limit 1;
    if found then
      perform asyncflow.pipeline_error(format('node %L: unknown field %L for a %s node', v_name, v_key, v_type));
    end if;
    if v_type in ('task', 'dynamic') then
      if v_node ? 'function' then
        if jsonb_typeof(v_node -> 'function') <> 'string'
          or not exists (select 1 from asyncflow.task_types y where y.task_type = v_node ->> 'function') then
          perform asyncflow.pipeline_error(format('node %L: unknown function %s (register its task type first)',
            v_name, v_node -> 'function'));
        end if;
      elsif v_type = 'dynamic' or not coalesce((v_node ->> 'async')::boolean, false) then
        perform asyncflow.pipeline_error(format('node %L: a %s node needs a function', v_name, v_type));
      end if;
      if jsonb_typeof(v_node -> 'stage') not in ('string', 'null') or (v_node ->> 'stage') !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
        perform asyncflow.pipeline_error(format('node %L: stage must match ^[A-Za-z0-9_.:/-]{1,64}$', v_name));
      end if;
      if jsonb_typeof(v_node -> 'priority') not in ('number', 'null')
        or (v_node ->> 'priority')::numeric not between 0 and 31104000 then
        perform asyncflow.pipeline_error(format('node %L: priority must be between 0 and 31104000', v_name));
      end if;
      if jsonb_typeof(v_node -> 'async') not in ('boolean', 'null') then
        perform asyncflow.pipeline_error(format('node %L: async must be true or false', v_name));
      end if;
      if jsonb_typeof(v_node -> 'timeout_retries') not in ('number', 'null')
        or (v_node ->> 'timeout_retries')::numeric not between 0 and 100 then
        perform asyncflow.pipeline_error(format('node %L: timeout_retries must be between 0 and 100', v_name));
      end if;
    end if;
    if jsonb_typeof(v_node -> 'timeout') not in ('number', 'null')
      or (v_node ->> 'timeout')::numeric not between 1 and 31536000 then
      perform asyncflow.pipeline_error(format('node %L: timeout must be seconds between 1 and 31536000', v_name));
    end if;
    if v_type = 'dynamic' then
      if jsonb_typeof(v_node -> 'items') is distinct from 'string' or not asyncflow.is_jsonpath(v_node ->> 'items') then
        perform asyncflow.pipeline_error(format('node %L: items must be a jsonpath such as "$.nodes.split.segments", got %s',
          v_name, coalesce((v_node -> 'items')::text, 'nothing')));
      end if;
      if jsonb_typeof(v_node -> 'max_segments') not in ('number', 'null')
        or (v_node ->> 'max_segments')::numeric not between 1 and 100000 then
        perform asyncflow.pipeline_error(format('node %L: max_segments must be between 1 and 100000', v_name));
      end if;
    end if;
    if v_type = 'pipeline' then
      if jsonb_typeof(v_node -> 'pipeline') is distinct from 'string' then
        perform asyncflow.pipeline_error(format('node %L: a pipeline node needs the name of a pipeline', v_name));
      end if;
      if v_node ->> 'pipeline' = p_name then
        perform asyncflow.pipeline_error(format('node %L: a pipeline cannot run itself', v_name));
      end if;
      if not exists (select 1 from asyncflow.pipelines p where p.name = v_node ->> 'pipeline'
          and p.status <> 'retired' and (v_node -> 'version' is null or p.version = (v_node ->> 'version')::numeric)) then
        perform asyncflow.pipeline_error(format('node %L: unknown pipeline %s%s', v_name, v_node -> 'pipeline',
          coalesce(' version ' || (v_node ->> 'version'), '')));
      end if;
    end if;
    if v_type = 'callback' and v_node ? 'url' and (jsonb_typeof(v_node -> 'url') <> 'string'
      or (v_node ->> 'url') !~ '^https?://[^\s]+$' or length(v_node ->> 'url') > 2048) then
      perform asyncflow.pipeline_error(format('node %L: url must be an http(s) URL of at most 2048 characters', v_name));
    end if;
    if v_type = 'start' then
      if v_start is not null then
        perform asyncflow.pipeline_error(format('node %L: a pipeline has exactly one start node (%L is one)', v_name, v_start));
      end if;
      v_start := v_name;
    elsif v_type = 'end' then
      if v_end is not null then
        perform asyncflow.pipeline_error(format('node %L: a pipeline has exactly one end node (%L is one)', v_name, v_end));
      end if;
      v_end := v_name;
    end if;
    v_order := v_order || v_name;
    v_defs := v_defs || (v_node - 'name');
    v_types := v_types || v_type;
    v_number := v_number || jsonb_build_object(v_name, cardinality(v_order));
  end loop;
  if v_start is null then
    perform asyncflow.pipeline_error('the pipeline has no start node');
  end if;
  if v_end is null then
    perform asyncflow.pipeline_error('the pipeline has no end node');
  end if;
  v_n := cardinality(v_order);

  -- Edges. The first edge listed twice is found in one pass; it is refused where the edge loop
  -- reaches it, after the checks of the edges before it and its own shape checks, as before.
  select min(k) into v_dup from (
    select k, row_number() over (partition by f, t order by k) as nth
    from (select k, case when jsonb_typeof(e) = 'array' then e ->> 0 else e ->> 'from' end as f,
            case when jsonb_typeof(e) = 'array' then e ->> 1 else e ->> 'to' end as t
          from jsonb_array_elements(p_definition -> 'edges') with ordinality x(e, k)) y
  ) z where nth > 1;
  for v_edge in select e from jsonb_array_elements(p_definition -> 'edges') e loop
    v_e := v_e + 1;
    if jsonb_typeof(v_edge) = 'array' and jsonb_array_length(v_edge) = 2 then
      v_edge := jsonb_build_object('from', v_edge -> 0, 'to', v_edge -> 1);
    end if;
    if jsonb_typeof(v_edge) <> 'object' or jsonb_typeof(v_edge -> 'from') is distinct from 'string'
      or jsonb_typeof(v_edge -> 'to') is distinct from 'string'
      or exists (select 1 from jsonb_object_keys(v_edge) k where k not in ('from', 'to', 'when')) then
      perform asyncflow.pipeline_error(format('edge %s: an edge is {"from", "to", "when"} or [from, to]', v_edge));
    end if;
    v_f := v_edge ->> 'from';
    v_t := v_edge ->> 'to';
    if not v_number ? v_f then
      perform asyncflow.pipeline_error(format('edge %s -> %s: unknown node %L', v_f, v_t, v_f));
    end if;
    if not v_number ? v_t then
      perform asyncflow.pipeline_error(format('edge %s -> %s: unknown node %L', v_f, v_t, v_t));
    end if;
    if v_f = v_t then
      perform asyncflow.pipeline_error(format('node %L: an edge from the node to itself is a cycle', v_f));
    end if;
    if v_t = v_start then
      perform asyncflow.pipeline_error(format('edge %s -> %s: node %L is the start node and has no in-edges', v_f, v_t, v_t));
    end if;
    if v_f = v_end then
      perform asyncflow.pipeline_error(format('edge %s -> %s: node %L is the end node and has no out-edges', v_f, v_t, v_f));
    end if;
    if v_e = v_dup then
      perform asyncflow.pipeline_error(format('edge %s -> %s: listed twice', v_f, v_t));
    end if;
    v_w := v_edge ->> 'when';
    if v_edge ? 'when' then
      if v_types[(v_number ->> v_f)::integer] <> 'router' then
        perform asyncflow.pipeline_error(format('edge %s -> %s: only a router''s edges have a condition (when)', v_f, v_t));
      end if;
      if jsonb_typeof(v_edge -> 'when') <> 'string' or not asyncflow.is_jsonpath(v_w) then
        perform asyncflow.pipeline_error(format('edge %s -> %s: when must be a jsonpath predicate such as "$.nodes.probe.duration_s > 60", got %s',
          v_f, v_t, v_edge -> 'when'));
      end if;
    end if;
    v_from := v_from || v_f;
    v_to := v_to || v_t;
    v_when := v_when || v_w;
    v_fi := v_fi || (v_number ->> v_f)::integer;
    v_ti := v_ti || (v_number ->> v_t)::integer;
  end loop;
  v_live := array_fill(true, array[v_e]);
  select * into v_out, v_out_at from asyncflow.graph_index(v_fi, v_n);
  select * into v_in, v_in_at from asyncflow.graph_index(v_ti, v_n);

  -- Cycles (Kahn): take away the nodes without an in-edge from a node still there, until none is
  -- left or every node left has one.
  v_count := array(select v_in_at[k + 1] - v_in_at[k] from generate_series(1, v_n) k);
  v_queue := array(select k from generate_series(1, v_n) k where v_count[k] = 0);
  v_head := 1;
  while v_head <= cardinality(v_queue) loop
    v_k := v_queue[v_head];
    v_head := v_head + 1;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      v_count[v_i] := v_count[v_i] - 1;
      if v_count[v_i] = 0 then
        v_queue := v_queue || v_i;
      end if;
    end loop;
  end loop;
  if cardinality(v_queue) < v_n then
    -- what is left is on a cycle or downstream of one; take away, the same way backwards, the
    -- nodes without an out-edge to a node left, and name one on the cycle itself
    v_seen := array(select v_count[k] > 0 from generate_series(1, v_n) k);
    v_count := array(select count(*) filter (where v_seen[k] and v_seen[v_ti[v_out[j]]])::integer
                     from generate_series(1, v_n) k
                     left join lateral generate_series(v_out_at[k], v_out_at[k + 1] - 1) j on true
                     group by k order by k);
    v_queue := array(select k from generate_series(1, v_n) k where v_seen[k] and v_count[k] = 0);
    v_head := 1;
    while v_head <= cardinality(v_queue) loop
      v_k := v_queue[v_head];
      v_head := v_head + 1;
      v_seen[v_k] := false;
      for v_j in v_in_at[v_k] .. v_in_at[v_k + 1] - 1 loop
        v_i := v_fi[v_in[v_j]];
        continue when not v_seen[v_i];
        v_count[v_i] := v_count[v_i] - 1;
        if v_count[v_i] = 0 then
          v_queue := v_queue || v_i;
        end if;
      end loop;
    end loop;
    v_cycle := array(select n from unnest(v_order) with ordinality u(n, k) where v_seen[k] order by k);
    perform asyncflow.pipeline_error(format('node %L: it is on a cycle (%s)', v_cycle[1], array_to_string(v_cycle, ', ')));
  end if;

  -- Every node is reachable from start ...
  v_seen := asyncflow.graph_reach((v_number ->> v_start)::integer, v_n, v_out_at, v_out, v_ti);
  select n into v_name from unnest(v_order) with ordinality u(n, k) where not v_seen[k] order by k limit 1;
  if found then
    perform asyncflow.pipeline_error(format('node %L: unreachable from the start node %L', v_name, v_start));
  end if;
  -- ... and has a path to the end.
  v_seen := asyncflow.graph_reach((v_number ->> v_end)::integer, v_n, v_in_at, v_in, v_fi);
  select n into v_name from unnest(v_order) with ordinality u(n, k) where not v_seen[k] order by k limit 1;
  if found then
    perform asyncflow.pipeline_error(format('node %L: no path from it to the end node %L', v_name, v_end));
  end if;

  -- Routers: at most one default edge; edges listed after it can never be taken (pruned).
  for v_k in 1 .. v_n loop
    continue when v_types[v_k] <> 'router';
    v_has_default := false;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_out[v_j];
      if v_has_default then
        v_live[v_i] := false;
        v_pruned := v_pruned || jsonb_build_object('edge', jsonb_build_array(v_from[v_i], v_to[v_i]),
          'why', 'listed after the router''s default edge: never taken');
      elsif v_when[v_i] is null then
        v_has_default := true;
      end if;
    end loop;
    if v_out_at[v_k + 1] = v_out_at[v_k] then
      perform asyncflow.pipeline_error(format('node %L: a router needs out-edges', v_order[v_k]));
    end if;
  end loop;
  -- Nodes left unreachable by the pruning are pruned too; the end must stay reachable.
  v_seen := asyncflow.graph_reach((v_number ->> v_start)::integer, v_n, v_out_at, v_out, v_ti, v_live);
  if not v_seen[(v_number ->> v_end)::integer] then
    perform asyncflow.pipeline_error(format('node %L: the end node can never be reached', v_end));
  end if;
  for v_k in 1 .. v_n loop
    if not v_seen[v_k] then
      v_pruned := v_pruned || jsonb_build_object('node', v_order[v_k], 'why', 'reachable only through pruned edges');
    end if;
  end loop;
  -- in and out of the nodes kept: their live edges from kept nodes, in definition order
  select jsonb_object_agg(x.k, x.v || jsonb_build_object('in', coalesce(i.edges, '[]'), 'out', coalesce(o.edges, '[]'),
    'in_degree', coalesce(jsonb_array_length(i.edges), 0))) into v_nodes
  from unnest(v_order, v_defs) with ordinality x(k, v, n)
  left join (select f, jsonb_agg(jsonb_build_object('to', t, 'when', w) order by e) as edges
             from unnest(v_from, v_to, v_when, v_fi) with ordinality u(f, t, w, fi, e)
             where v_live[e] and v_seen[fi] group by f) o on o.f = x.k
  left join (select t, jsonb_agg(to_jsonb(f) order by e) as edges
             from unnest(v_from, v_to, v_fi) with ordinality u(f, t, fi, e)
             where v_live[e] and v_seen[fi] group by t) i on i.t = x.k
  where v_seen[x.n];

  v_plan := jsonb_build_object('start', v_start, 'end', v_end,
    'timeout', coalesce((p_definition ->> 'timeout')::numeric, 86400),
    'retries', coalesce((p_definition ->> 'retries')::integer, 0),
    'nodes', v_nodes,
    'order', to_jsonb(array(select n from unnest(v_order) with ordinality u(n, k) where v_seen[k] order by k)),
    'pruned', v_pruned);

  -- (V36) The steps one call can run through the plan, within the stack (plan_steps).
  select * into v_plan, v_path from asyncflow.plan_steps(v_plan);
  if (v_plan ->> 'steps')::integer > asyncflow.plan_step_limit() then
    perform asyncflow.pipeline_error(format('node %L: reaching it can take %s steps in one call (%s), more than the limit '
      'of %s: the engine runs the nodes that complete at once (3 steps each; a sub-pipeline 5 plus its own) and skips a '
      'branch a router does not take (1 step a node) by recursion, within PostgreSQL''s stack',
      v_path[cardinality(v_path)], v_plan ->> 'steps',
      array_to_string(case when cardinality(v_path) > 7
        then v_path[1:3] || '...'::text || v_path[cardinality(v_path) - 2:] else v_path end, ' -> '),
      asyncflow.plan_step_limit()));
  end if;
  return v_plan;
end
$_$;

CREATE FUNCTION asyncflow.complete_node(run_id text, node text, result jsonb DEFAULT NULL::jsonb, error text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
#variable_conflict use_column
declare
  v_run asyncflow.runs := asyncflow.wf_run_for_update($1);
  v_now timestamptz := coalesce(p_now, now());
  v_event asyncflow.run_events;
  v_max_bytes integer;
begin
  select * into v_event from asyncflow.run_events e
  where e.day = v_run.day and e.event_id = v_run.run_id || '_' || $2 for update;
  if not found then
    perform asyncflow.wf_run_error('AF012', format('run %s has no node %s', v_run.run_id, coalesce(quote_literal($2), 'null')));
  end if;
  if v_event.status <> 'external' then
    perform asyncflow.wf_run_error('AF013', format('node %s of run %s is %s, not waiting for an external completion',
      $2, v_run.run_id, v_event.status));
  end if;
  select max_context_bytes into v_max_bytes from asyncflow.config;
  if pg_column_size($3) > v_max_bytes then
    perform asyncflow.raise_error('AF005', format('result is too large: %s bytes, the limit is %s', pg_column_size($3), v_max_bytes));
  end if;
  if $4 is null then
    perform asyncflow.wf_complete_event(v_event.event_id, coalesce($3, v_event.result, '{}'::jsonb), v_now);
  else
    perform asyncflow.wf_fail_event(v_event.event_id, $4, v_now);
  end if;
  return asyncflow.run_json(asyncflow.wf_get_run(v_run.run_id));
end
$_$;

CREATE FUNCTION asyncflow.create_claim_function(p_task_type text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
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
      -- fair_queues
      v_begin integer;
      v_after text;
      v_at text;
      v_limits boolean;
      v_from text;
      v_keys text[];
      v_heads timestamptz[];
      v_walk integer;
      v_walked integer;
      v_budget integer;
      v_claimed asyncflow.claimed_task[];
      v_claimed_keys text[];
      v_n integer;
      v_wrapped boolean := false;
      v_since integer := 0;
      v_got integer := 0;
      v_probes integer := 0;
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

      if not v_type.fair_queues then
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
        return;
      end if;

      -- Turns of queue_key, a round at a time: every key with a pending task once, in key order
      -- from the one after the cursor (v_after) to the last, then from the first to the cursor
      -- (the second segment, v_wrapped). Keys are walked a batch at a time (one statement: a
      -- loose scan of the key index), and the walked keys' oldest ready tasks claimed in one more
      -- (one per key, in key order, passing keys at their limit, until the batch is full). A
      -- round that claims nothing (v_since = 0) ends the claim; a single key with a backlog so
      -- fills the batch one task per round. v_at: where the claim stopped (the cursor).
      -- a limit of its own for some key (asyncflow.queue_limits)?
      v_limits := exists (select 1 from asyncflow.queue_limits l where l.task_type = v_task_type);
      if v_type.queue_concurrency is not null or v_limits then
        -- the type's claimers count and claim one at a time; each waits here for the one before
        -- it to commit, and its counts below (each statement a new snapshot) see that claim
        perform pg_advisory_xact_lock(16713, hashtext(v_task_type));
      end if;
      select begin_pos into v_begin from asyncflow.positions where task_type = v_task_type;
      select after_key into v_after from asyncflow.queue_cursors where task_type = v_task_type;
      v_at := v_after;
      v_from := v_after;
      v_budget := greatest(4 * v_limit + 16, 1000);
      while v_got < v_limit and v_probes < v_budget loop
        v_walk := least(greatest(2 * (v_limit - v_got), 32), v_budget - v_probes);
        -- the next keys after v_from (null: from the first) with a pending task, each with its
        -- oldest one's order_time; in the second segment up to v_after
        with recursive walk(k, head, n) as (
          (select coalesce(t.queue_key, ''), t.order_time, 1 from asyncflow.%2$I t
           where v_from is null and t.shard >= v_begin and t.status = 'pending'
           order by coalesce(t.queue_key, ''), t.order_time limit 1)
          union all
          (select coalesce(t.queue_key, ''), t.order_time, 1 from asyncflow.%2$I t
           where v_from is not null and t.shard >= v_begin and t.status = 'pending'
             and coalesce(t.queue_key, '') > v_from
           order by coalesce(t.queue_key, ''), t.order_time limit 1)
          union all
          select x.k, x.head, w.n + 1 from walk w
          cross join lateral (
            select coalesce(t.queue_key, '') as k, t.order_time as head from asyncflow.%2$I t
            where t.shard >= v_begin and t.status = 'pending' and coalesce(t.queue_key, '') > w.k
            order by coalesce(t.queue_key, ''), t.order_time limit 1) x
          where w.n < v_walk and (not v_wrapped or w.k < v_after)
        )
        select array_agg(w.k order by w.n), array_agg(w.head order by w.n) into v_keys, v_heads
        from walk w where not v_wrapped or w.k <= v_after;
        v_walked := coalesce(cardinality(v_keys), 0);
        v_probes := v_probes + v_walked;
        if v_walked > 0 then
          -- the walked keys' oldest ready tasks, one per key that has room, in key order
          with cand as (
            select w.k, w.ord from unnest(v_keys, v_heads) with ordinality w(k, head, ord)
            cross join lateral (
              select coalesce((select l.concurrency from asyncflow.queue_limits l
                               where v_limits and l.task_type = v_task_type and l.queue_key = w.k),
                              v_type.queue_concurrency) as cap) c
            where w.head <= v_now
              and (c.cap is null or (select count(*) from asyncflow.%2$I r
                                     where r.shard >= v_begin and coalesce(r.queue_key, '') = w.k
                                       and r.status = 'running') < c.cap)
          ), picked as (
            select p.shard, p.id, cand.k, cand.ord from cand
            cross join lateral (
              select t.shard, t.id from asyncflow.%2$I t
              where t.shard >= v_begin and coalesce(t.queue_key, '') = cand.k and t.status = 'pending'
                and t.order_time <= v_now
              order by t.order_time limit 1
              for update skip locked) p
            order by cand.ord
            limit v_limit - v_got
          ), claimed as (
            update asyncflow.%2$I t set
              status = 'running', owner = p_owner, attempt = t.attempt + 1, claim_seq = t.claim_seq + 1,
              claimed_at = v_now, lease_until = v_now + make_interval(secs => v_type.max_processing_time),
              updated_at = v_now
            from picked
            where t.shard = picked.shard and t.id = picked.id
            returning row(asyncflow.format_task_id(v_task_type, t.shard, t.id), v_task_type, t.stage, t.context,
              t.priority, t.attempt, t.claim_seq, t.user_id, t.lease_until, t.claimed_at)::asyncflow.claimed_task as task,
              picked.k, picked.ord
          )
          select array_agg(c.task order by c.ord), array_agg(c.k order by c.ord) into v_claimed, v_claimed_keys
          from claimed c;
          v_n := coalesce(cardinality(v_claimed), 0);
          if v_n > 0 then
            return query select * from unnest(v_claimed);
            v_got := v_got + v_n;
            v_since := v_since + v_n;
          end if;
          if v_got >= v_limit then
            v_at := v_claimed_keys[v_n];  -- the keys walked past it get their turn next time
            exit;
          end if;
          v_from := v_keys[v_walked];
          v_at := v_from;
        end if;
        if v_walked < v_walk or (v_wrapped and v_from >= v_after) then
          -- the segment is over
          if not v_wrapped and v_after is not null then
            v_wrapped := true;
            v_from := null;
          else
            -- so is the round
            exit when v_since = 0;
            v_since := 0;
            v_wrapped := false;
            v_from := v_after;
          end if;
        end if;
      end loop;
      -- a claim that claimed nothing and walked all it could leaves the cursor: an idle type's
      -- polls write nothing
      if v_at is distinct from v_after and (v_got > 0 or v_probes >= v_budget) then
        insert into asyncflow.queue_cursors as c (task_type, after_key, updated_at)
        values (v_task_type, v_at, v_now)
        on conflict (task_type) do update set after_key = excluded.after_key, updated_at = excluded.updated_at;
      end if;
      if v_got > 0 then
        insert into asyncflow.type_counters as k (task_type, slot, claimed)
        values (v_task_type, pg_backend_pid() %% 16, v_got)
        on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed;
      end if;
    end
    $body$
    $f$, v_name, 'tasks_' || p_task_type, p_task_type);
  execute format('revoke all on function asyncflow.%I(text, integer, timestamptz) from public', v_name);
  execute format('grant execute on function asyncflow.%I(text, integer, timestamptz) to asyncflow_worker', v_name);
end
$_$;

CREATE FUNCTION asyncflow.create_hold_functions(p_task_type text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
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
      if v_type.concurrency is not null or v_type.fair_queues or exists (select 1 from pg_catalog.pg_trigger
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

  -- type_finish__<type>(owner, shards, ids, claim_seqs, outcomes, results, stages, contexts,
  -- seconds): ends a hold, in the hold's transaction. Each task's outcome is its call's reply when
  -- it came while the hold was open: 'succeed' (with its result) or 'advance' (with the next
  -- stage and, or null to keep it, the next context), its call having taken `seconds` from the
  -- claim; null when the call has not replied. A success within max_context_bytes ends
  -- succeeded (finished_at, the stage-time histogram); an advance whose stage and context would
  -- pass report_tasks' checks goes on to its next stage as a report would have put it (pending,
  -- attempt 0, its schedule-log entry, ready at once); every other task is claimed ('running',
  -- leased) and its reply, if any, is reported as usual. Only rows this transaction has locked
  -- (the hold's: their xmax is its xid), pending, whose claim_seq is one behind the one given,
  -- change: without the hold a finish changes nothing. Answers (accepted, status, lease) come
  -- only for the tasks that did not end as asked: refused (not accepted), or claimed although
  -- their call replied (a result too large, a bad stage: its report will say so); no answer
  -- means the reply was written, or the task claimed.
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_shards integer[], p_ids bigint[],
      p_claim_seqs integer[], p_outcomes text[], p_results jsonb[], p_stages text[], p_contexts jsonb[],
      p_seconds double precision[])
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
        or cardinality(p_outcomes) is distinct from cardinality(p_ids)
        or cardinality(p_results) is distinct from cardinality(p_ids)
        or cardinality(p_stages) is distinct from cardinality(p_ids)
        or cardinality(p_contexts) is distinct from cardinality(p_ids)
        or cardinality(p_seconds) is distinct from cardinality(p_ids)
        -- unnest would flatten an array of more dimensions
        or coalesce(array_ndims(p_shards), 1) <> 1 or coalesce(array_ndims(p_ids), 1) <> 1
        or coalesce(array_ndims(p_claim_seqs), 1) <> 1 or coalesce(array_ndims(p_outcomes), 1) <> 1
        or coalesce(array_ndims(p_results), 1) <> 1 or coalesce(array_ndims(p_stages), 1) <> 1
        or coalesce(array_ndims(p_contexts), 1) <> 1 or coalesce(array_ndims(p_seconds), 1) <> 1 then
        perform asyncflow.raise_error('AF006', 'shards, ids, claim_seqs, outcomes, results, stages, contexts and '
          'seconds: one-dimensional arrays of one length, at most 10000');
      end if;
      if exists (select 1 from unnest(p_outcomes) o where o not in ('succeed', 'advance')) then
        perform asyncflow.raise_error('AF006', 'a held task''s outcome must be succeed, advance or null');
      end if;
      select v_claimed_at + make_interval(secs => max_processing_time) into v_lease_until
      from asyncflow.task_types where task_type = v_task_type;
      select max_context_bytes into v_max_bytes from asyncflow.config;
      if array_position(p_outcomes, 'succeed') is null and array_position(p_outcomes, 'advance') is null then
        -- claims only: as type_claim__, not waiting for the disk
        perform set_config('synchronous_commit', 'off', true);
      end if;
      return query
      with r as (
        -- the hold's tasks, named by shard and number (no ids to parse); each once, as the
        -- worker names them (a task named twice is changed for one of its mentions, which one
        -- is not defined, and the other is answered as refused)
        select x.n, x.shard, x.id, x.claim_seq, x.outcome, x.result, x.stage,
          nullif(x.context, 'null'::jsonb) as context,
          -- the reply can be written here: report_tasks' checks of a success or an advance
          case x.outcome
            when 'succeed' then coalesce(pg_column_size(x.result) <= v_max_bytes, true)
            when 'advance' then coalesce(x.stage ~ '^[A-Za-z0-9_.:/-]{1,64}$', false)
              and coalesce(jsonb_typeof(x.context) in ('object', 'null'), true)
              and coalesce(pg_column_size(x.context) <= v_max_bytes, true)
              and coalesce(pg_column_size(x.result) <= v_max_bytes, true)
            else false end as ok,
          -- the call's time, within what has passed since the claim, in whole milliseconds
          -- (the log entry's cost_ms; secs below is made from it, not floored again: 1.001 * 1000
          -- is 1000.99... in double precision)
          floor(least(greatest(coalesce(x.secs, v_ended), 0), v_ended) * 1000)::bigint as ms
        from unnest(p_shards, p_ids, p_claim_seqs, p_outcomes, p_results, p_stages, p_contexts, p_seconds)
          with ordinality as x(shard, id, claim_seq, outcome, result, stage, context, secs, n)
      ), changed as (
        update asyncflow.%2$I t set
          status = case when not r.ok then 'running' when r.outcome = 'succeed' then 'succeeded'
            else 'pending' end::asyncflow.task_status,
          -- an advance leaves no owner, as its report would have
          owner = case when r.ok and r.outcome = 'advance' then null else p_owner end,
          attempt = case when r.ok and r.outcome = 'advance' then 0 else t.attempt + 1 end,
          claim_seq = t.claim_seq + 1, claimed_at = v_claimed_at,
          lease_until = case when not r.ok then v_lease_until end,
          stage = case when r.ok and r.outcome = 'advance' then r.stage else t.stage end,
          context = case when r.ok and r.outcome = 'advance' then coalesce(r.context, t.context) else t.context end,
          order_time = case when r.ok and r.outcome = 'advance'
            then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) - make_interval(secs => t.priority)
            else t.order_time end,
          -- the entry report_tasks writes for an advance; a success's is made from the row when read
          schedule_log = case when r.ok and r.outcome = 'advance'
            then asyncflow.append_log(t.schedule_log, jsonb_build_object('worker', p_owner, 'stage', t.stage,
              'attempt', t.attempt + 1, 'start', v_claimed_at, 'cost_ms', r.ms,
              'outcome', 'advance'))
            else t.schedule_log end,
          result = case when r.ok and r.outcome = 'succeed' then coalesce(r.result, '{}'::jsonb) else t.result end,
          finished_at = case when r.ok and r.outcome = 'succeed'
            then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) else t.finished_at end,
          updated_at = case when r.ok then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) else v_claimed_at end
        from r
        where t.shard = r.shard and t.id = r.id
          -- status compared as text: the ready index must not look like a way in
          and t.status::text = 'pending' and t.claim_seq + 1 = r.claim_seq and t.xmax = v_xid
        -- the stage the call ran: an advance's is in the entry just written
        returning r.n, t.status, t.lease_until, r.ok, r.ms / 1000.0::float8 as secs,
          case when r.ok and r.outcome = 'advance' then t.schedule_log -> -1 ->> 'stage' else t.stage end as stage
      ), counted as (
        insert into asyncflow.type_counters as k (task_type, slot, claimed, succeeded)
        select v_task_type, pg_backend_pid() %% 16, count(*), count(*) filter (where c.status = 'succeeded')
        from changed c having count(*) > 0
        on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed,
          succeeded = k.succeeded + excluded.succeeded
      ), per_bucket as (
        -- the calls whose replies were written into the stage-time histogram, as type_report__ does
        select c.stage, d.k, count(*) as n, sum(c.secs) as secs
        from changed c
        cross join lateral (select width_bucket(c.secs, asyncflow.stage_time_bounds())
          - (c.secs = any (asyncflow.stage_time_bounds()))::integer as k) d
        where c.ok
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
      where c.n is null or (r.outcome is not null and not r.ok)
      order by r.n;
      -- Tasks that went on to their next stage are ready for any worker of the type (one NOTIFY).
      if array_position(p_outcomes, 'advance') is not null then
        perform asyncflow.wake(v_task_type);
      end if;
    end
    $body$
    $f$, v_finish, 'tasks_' || p_task_type, p_task_type);
  -- The finish as V22 had it (done instead of outcomes; done is 'succeed'), for the workers of
  -- the version before still running while the database is migrated: without it their every
  -- hold would fail (42883) and roll back until they were restarted.
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_shards integer[], p_ids bigint[],
      p_claim_seqs integer[], p_done boolean[], p_results jsonb[], p_seconds double precision[])
    returns table (n bigint, task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
    language sql set search_path = pg_catalog, pg_temp as $body$
      select * from asyncflow.%1$I(p_owner, p_shards, p_ids, p_claim_seqs,
        array(select case when u.done then 'succeed' end from unnest(p_done) with ordinality u(done, i) order by u.i),
        p_results, array_fill(null::text, array[coalesce(cardinality(p_ids), 0)]),
        array_fill(null::jsonb, array[coalesce(cardinality(p_ids), 0)]), p_seconds)
    $body$
    $f$, v_finish);
  execute format('revoke all on function asyncflow.%I(text, integer) from public', v_hold);
  execute format('grant execute on function asyncflow.%I(text, integer) to asyncflow_worker', v_hold);
  execute format('revoke all on function asyncflow.%I(text, integer[], bigint[], integer[], text[], jsonb[], text[], '
    'jsonb[], double precision[]) from public', v_finish);
  execute format('grant execute on function asyncflow.%I(text, integer[], bigint[], integer[], text[], jsonb[], text[], '
    'jsonb[], double precision[]) to asyncflow_worker', v_finish);
  execute format('revoke all on function asyncflow.%I(text, integer[], bigint[], integer[], boolean[], jsonb[], '
    'double precision[]) from public', v_finish);
  execute format('grant execute on function asyncflow.%I(text, integer[], bigint[], integer[], boolean[], jsonb[], '
    'double precision[]) to asyncflow_worker', v_finish);
end
$_$;

CREATE FUNCTION asyncflow.create_report_function(p_task_type text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.create_shard(p_task_type text, p_shard integer, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_leaf text := 'tasks_' || p_task_type || '_' || p_shard;
begin
  perform asyncflow.check_type_name(p_task_type);
  -- A queue shard churns: every task is updated at least twice and its old versions leave dead
  -- entries at the head of the ready index that claims must step over until VACUUM removes
  -- them. Autovacuum therefore visits a shard after 1 % of its rows changed (default 20 %), and
  -- analyzes it after 2 % (the claim's plan does not depend on statistics, see claim_tasks, but
  -- the other queries' do).
  execute format('create table asyncflow.%I (like asyncflow.tasks including defaults) with ('
    'autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, '
    'autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02)', v_leaf);
  execute format('alter table asyncflow.%I attach partition asyncflow.%I for values in (%L)',
    'tasks_' || p_task_type, v_leaf, p_shard);
  insert into asyncflow.shards (task_type, shard, created_at) values (p_task_type, p_shard, p_now);
end
$$;

CREATE FUNCTION asyncflow.create_task(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, queue_key text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    AS $_$
declare
  -- only keyword and pg_catalog types: a variable's type is looked up when the body is compiled,
  -- under the search_path of the first caller in the session
  v_now timestamp with time zone := coalesce(p_now, pg_catalog.now());
  v_pos integer;
  v_id bigint;
  v_max_bytes integer;
  v_seq pg_catalog.regclass;
  v_initial_stage pg_catalog.text;
  v_retry_num integer;
  v_retry_interval integer;
begin
  -- No SET search_path (V33): every name below is schema-qualified, operators included.
  -- (V38) And no comparison takes the caller's collation: a plpgsql function's text parameters
  -- take the collation of the call's arguments, and under a nondeterministic one of the caller's
  -- (CREATE COLLATION needs no privilege) 'a_b' = 'ab', so the lookup found another type's row.
  if idempotency_key is null then
    -- What the checks and the row need, in one read of enqueue_info (V25); the checks in one
    -- expression, the same as create_task_general's; the wake written out (asyncflow.wake's
    -- try-lock and NOTIFY).
    select e.end_pos, e.id_seq, e.initial_stage, e.max_retry_num, e.max_retry_interval, e.max_context_bytes
      into v_pos, v_seq, v_initial_stage, v_retry_num, v_retry_interval, v_max_bytes
      from asyncflow.enqueue_info e
      where e.task_type operator(pg_catalog.=) (create_task.task_type collate pg_catalog."default");
    if found
      and (context is null
        or pg_catalog.jsonb_typeof(context) operator(pg_catalog.=) any ('{object,null}'::pg_catalog.text[]))
      and (priority is null
        or (priority operator(pg_catalog.>=) 0 and priority operator(pg_catalog.<=) 31104000))
      and coalesce(pg_catalog.pg_column_size(context) operator(pg_catalog.<=) v_max_bytes, true)
      and (run_at is null
        or (run_at operator(pg_catalog.>=) '0002-01-01 00:00:00+00'::timestamp with time zone
          and run_at operator(pg_catalog.<=) '9999-01-01 00:00:00+00'::timestamp with time zone))
      and (stage is null or stage operator(pg_catalog.~) '^[A-Za-z0-9_.:/-]{1,64}$'::pg_catalog.text)
      and coalesce(pg_catalog.length(user_id) operator(pg_catalog.<=) 255, true)
      and (queue_key is null or (pg_catalog.length(queue_key) operator(pg_catalog.>=) 1
        and pg_catalog.length(queue_key) operator(pg_catalog.<=) 255)) then
      v_id := pg_catalog.nextval(v_seq);
      insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
        max_retry_interval, order_time, user_id, queue_key, context, created_at, updated_at)
      values (create_task.task_type, v_pos, v_id, coalesce(stage, v_initial_stage), 'pending',
        coalesce(priority, 0), v_retry_num, v_retry_interval,
        coalesce(run_at, v_now) operator(pg_catalog.-) pg_catalog.make_interval(secs => coalesce(priority, 0)),
        user_id, queue_key,
        case when context operator(pg_catalog.=) 'null'::pg_catalog.jsonb then '{}'::pg_catalog.jsonb
          else coalesce(context, '{}'::pg_catalog.jsonb) end,
        v_now, v_now);
      if pg_catalog.pg_try_advisory_xact_lock(16712, pg_catalog.hashtext(create_task.task_type collate pg_catalog."default")) then
        perform pg_catalog.pg_notify('asyncflow', create_task.task_type);
      end if;
      -- asyncflow.format_task_id, written out (its body would be read under the caller's path)
      return create_task.task_type operator(pg_catalog.||) '-' operator(pg_catalog.||) v_pos::pg_catalog.text
        operator(pg_catalog.||) '-' operator(pg_catalog.||) v_id::pg_catalog.text;
    end if;
  end if;
  -- (V38) the explicit collation makes the call's, so every text parameter's, the default one
  return asyncflow.create_task_general(create_task.task_type collate pg_catalog."default", context, priority, run_at, stage,
    idempotency_key, user_id, p_now, queue_key);
end
$_$;

CREATE FUNCTION asyncflow.create_task_general(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, queue_key text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_task jsonb;
  v_type asyncflow.task_types;
  v_now timestamptz := coalesce(p_now, now());
  v_pos integer;
  v_id bigint;
  v_max_bytes integer;
begin
  -- Without an idempotency key: the checks, each with its error, then one INSERT ... VALUES.
  if idempotency_key is null then
    select * into v_type from asyncflow.task_types y where y.task_type = create_task_general.task_type;
    if not found then
      perform asyncflow.check_type_name(create_task_general.task_type);
      perform asyncflow.raise_error('AF001', format('unknown task type %L', create_task_general.task_type));
    end if;
    select max_context_bytes into v_max_bytes from asyncflow.config;
    if context is not null and jsonb_typeof(context) not in ('object', 'null') then
      perform asyncflow.raise_error('AF006', 'context must be a JSON object');
    elsif priority is not null and priority not between 0 and 31104000 then
      perform asyncflow.raise_error('AF004',
        format('priority must be an integer between 0 and 31104000 (seconds ahead), got %s', priority));
    elsif pg_column_size(context) > v_max_bytes then
      perform asyncflow.raise_error('AF005', format(
        'context is too large: %s bytes, the limit is %s (asyncflow.config.max_context_bytes)',
        pg_column_size(context), v_max_bytes));
    elsif run_at is not null and not run_at between '0002-01-01 00:00:00+00' and '9999-01-01 00:00:00+00' then
      -- (V29) years 2 to 9998: the task's times stay years 1 to 9999 in any time zone, which
      -- JSON readers of RFC 3339 can read (V26 allowed from 4713 BC, written "... BC")
      perform asyncflow.raise_error('AF006', format('run_at must be a timestamp from 0002-01-01 to 9999-01-01 (UTC), got %s', run_at));
    elsif stage is not null and stage !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
      perform asyncflow.raise_error('AF006', format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', to_jsonb(stage)));
    elsif length(user_id) > 255 then
      perform asyncflow.raise_error('AF006',
        format('user_id must be a string of at most 255 characters, got %s', to_jsonb(user_id)));
    elsif length(queue_key) not between 1 and 255 then
      perform asyncflow.raise_error('AF006',
        format('queue_key must be a string of 1 to 255 characters, got %s', to_jsonb(queue_key)));
    end if;
    select end_pos into v_pos from asyncflow.positions p where p.task_type = create_task_general.task_type;
    v_id := nextval(v_type.id_seq);
    insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
      max_retry_interval, order_time, user_id, queue_key, context, created_at, updated_at)
    values (create_task_general.task_type, v_pos, v_id, coalesce(stage, v_type.initial_stage), 'pending', coalesce(priority, 0),
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce(run_at, v_now) - make_interval(secs => coalesce(priority, 0)),
      user_id, queue_key, coalesce(nullif(context, 'null'::jsonb), '{}'::jsonb), v_now, v_now);
    perform asyncflow.wake(create_task_general.task_type);
    return asyncflow.format_task_id(create_task_general.task_type, v_pos, v_id);
  end if;

  v_task := jsonb_build_object('context', coalesce(context, '{}'::jsonb), 'priority', coalesce(priority, 0));
  if run_at is not null then v_task := v_task || jsonb_build_object('run_at', run_at); end if;
  if stage is not null then v_task := v_task || jsonb_build_object('stage', stage); end if;
  if idempotency_key is not null then v_task := v_task || jsonb_build_object('idempotency_key', idempotency_key); end if;
  if user_id is not null then v_task := v_task || jsonb_build_object('user_id', user_id); end if;
  if queue_key is not null then v_task := v_task || jsonb_build_object('queue_key', queue_key); end if;
  return (asyncflow.insert_tasks(task_type, jsonb_build_array(v_task), p_now, true))[1];
end
$_$;

CREATE FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_n bigint;
begin
  if jsonb_typeof(tasks) = 'array' and jsonb_path_exists(tasks, 'strict $[*] ? (@.type() != "object")') then
    select x.n into v_n from jsonb_array_elements(tasks) with ordinality x(e, n)
    where jsonb_typeof(x.e) <> 'object' order by x.n limit 1;
    perform asyncflow.raise_error('AF006', format('tasks[%s]: must be a JSON object', v_n - 1));
  end if;
  -- (V38) insert_tasks gets the default collation, not the caller's (see create_task)
  return query select unnest(asyncflow.insert_tasks(task_type collate "default", tasks, p_now, false));
end
$_$;

CREATE FUNCTION asyncflow.drop_expired_runs(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF date
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_day date;
  v_days date[];
  v_table text;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  -- (V37) a day that cannot go is not locked at all (checked again under the locks below); the
  -- days are read whole first, since a query still open on a partition keeps it from being dropped
  select coalesce(array_agg(d.day order by d.day), '{}') into v_days
  from asyncflow.run_days d, asyncflow.config c
  where d.dropped_at is null and d.day + 1 <= ((v_now - make_interval(secs => c.run_retention)) at time zone 'UTC')::date
    and not exists (select 1 from asyncflow.runs r where r.day = d.day and r.status in ('scheduled', 'running'))
    and not exists (select 1 from asyncflow.callbacks k where k.day = d.day and k.status = 'pending');
  foreach v_day in array v_days loop
    begin
      -- (V37) the tables, then the day's partitions: the order every statement on run records
      -- takes. DROP TABLE of a partition locks its table too; taking the partitions first, as
      -- V12 did, deadlocked with a statement holding the table and reaching for the partition.
      -- Only the first table is waited for long (nothing is held yet); after it each lock is
      -- waited for briefly, since the workflow functions take the tables in no single order
      -- and one of them may hold the next table while waiting for one taken here. (Once a day
      -- is dropped, the tables stay locked and these are no-ops for the next days.)
      perform set_config('lock_timeout', '1s', true);
      lock table only asyncflow.runs in access exclusive mode;
      perform set_config('lock_timeout', '100ms', true);
      lock table only asyncflow.run_events, asyncflow.run_segments, asyncflow.run_traces, asyncflow.callbacks
        in access exclusive mode;
      foreach v_table in array array['runs', 'run_events', 'run_segments', 'run_traces', 'callbacks'] loop
        execute format('lock table asyncflow.%I in access exclusive mode', v_table || '_' || to_char(v_day, 'YYYYMMDD'));
      end loop;
      if exists (select 1 from asyncflow.runs r where r.day = v_day and r.status in ('scheduled', 'running'))
        or exists (select 1 from asyncflow.callbacks c where c.day = v_day and c.status = 'pending') then
        perform set_config('lock_timeout', v_lock_timeout, true);
        continue;
      end if;
      foreach v_table in array array['callbacks', 'run_traces', 'run_segments', 'run_events', 'runs'] loop
        execute format('drop table asyncflow.%I', v_table || '_' || to_char(v_day, 'YYYYMMDD'));
      end loop;
      perform set_config('lock_timeout', v_lock_timeout, true);
    exception when lock_not_available or deadlock_detected then
      -- busy: tried again at the next pass (everything this day took is released)
      perform set_config('lock_timeout', v_lock_timeout, true);
      continue;
    end;
    update asyncflow.run_days set dropped_at = v_now where day = v_day;
    return next v_day;
  end loop;
end
$$;

CREATE FUNCTION asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_shard integer;
  v_leaf text;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  perform asyncflow.check_type_name(p_task_type);
  for v_shard in
    -- (V34) any closed shard below the end one, not only those below begin_pos (a shard above
    -- begin_pos is closed when it holds no live task, see advance_begin_pos)
    select s.shard from asyncflow.shards s
    join asyncflow.positions p on p.task_type = s.task_type
    join asyncflow.task_types y on y.task_type = s.task_type
    where s.task_type = p_task_type and s.dropped_at is null and s.shard < p.end_pos
      and s.closed_at <= v_now - make_interval(secs => y.retention)
    order by s.shard
  loop
    v_leaf := 'tasks_' || p_task_type || '_' || v_shard;
    begin
      perform set_config('lock_timeout', '1s', true);
      -- (V30) the type's table first, then the shard: the order every claim, report and insert
      -- takes them in. DROP TABLE of a shard locks its parent too; taking the shard first, as V6
      -- did, deadlocked with claims holding the parent and waiting for the shard.
      execute format('lock table asyncflow.%I in access exclusive mode', 'tasks_' || p_task_type);
      execute format('lock table asyncflow.%I in access exclusive mode', v_leaf);
      if asyncflow.shard_is_live(p_task_type, v_shard) then
        update asyncflow.shards set closed_at = null where task_type = p_task_type and shard = v_shard;
        update asyncflow.positions set begin_pos = least(begin_pos, v_shard), updated_at = v_now
        where task_type = p_task_type;
        perform set_config('lock_timeout', v_lock_timeout, true);
        continue;
      end if;
      execute format('drop table asyncflow.%I', v_leaf);
      perform set_config('lock_timeout', v_lock_timeout, true);
    exception when lock_not_available or undefined_table then
      -- busy (tried again at the next pass), or dropped meanwhile by a pass running beside this
      -- one, which records it
      perform set_config('lock_timeout', v_lock_timeout, true);
      continue;
    end;
    delete from asyncflow.idempotency_keys where task_type = p_task_type and shard = v_shard;
    update asyncflow.shards set dropped_at = v_now where task_type = p_task_type and shard = v_shard;
    return next v_shard;
  end loop;
end
$$;

CREATE FUNCTION asyncflow.ensure_run_day(p_day date) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_table text;
begin
  if exists (select 1 from asyncflow.run_days where day = p_day) then
    return;
  end if;
  perform pg_advisory_xact_lock(16713, 0);
  if exists (select 1 from asyncflow.run_days where day = p_day) then
    return;
  end if;
  foreach v_table in array array['runs', 'run_events', 'run_segments', 'run_traces', 'callbacks'] loop
    execute format('create table asyncflow.%I (like asyncflow.%I including defaults including constraints)',
      v_table || '_' || to_char(p_day, 'YYYYMMDD'), v_table);
    execute format('alter table asyncflow.%I attach partition asyncflow.%I for values from (%L) to (%L)',
      v_table, v_table || '_' || to_char(p_day, 'YYYYMMDD'), p_day, p_day + 1);
  end loop;
  insert into asyncflow.run_days (day) values (p_day);
end
$$;

CREATE FUNCTION asyncflow.format_task_id(p_task_type text, p_shard integer, p_id bigint) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select p_task_type || '-' || p_shard::text || '-' || p_id::text
$$;

CREATE FUNCTION asyncflow.get_pipeline(name text, version integer DEFAULT NULL::integer) RETURNS jsonb
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
  select asyncflow.pipeline_json(p) from asyncflow.pipelines p
  where p.name = $1 and ($2 is null or p.version = $2)
  order by (p.status = 'active') desc, p.version desc limit 1
$_$;

CREATE FUNCTION asyncflow.get_run(run_id text) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_run asyncflow.runs := asyncflow.wf_get_run($1);
begin
  if v_run.run_id is null then
    return null;
  end if;
  return asyncflow.run_json(v_run) || jsonb_build_object(
    'events', coalesce((select jsonb_agg(jsonb_build_object('event_id', e.event_id, 'node', e.node, 'type', e.node_type,
        'status', e.status, 'exec_cnt', e.exec_cnt, 'latch_cnt', e.latch_cnt, 'in_degree', e.in_degree,
        'segment_cnt', e.segment_cnt, 'task_id', e.task_id, 'child_run', e.child_run, 'result', e.result,
        'error', e.error, 'deadline', e.deadline, 'started_at', e.started_at, 'finished_at', e.finished_at,
        'total_cost_ms', e.total_cost_ms)
        || case when e.node_type = 'dynamic' then jsonb_build_object('segments', coalesce((
          select jsonb_agg(jsonb_build_object('segment_id', s.segment_id, 'n', s.n, 'status', s.status,
            'exec_cnt', s.exec_cnt, 'task_id', s.task_id, 'item', s.item, 'result', s.result, 'error', s.error,
            'started_at', s.started_at, 'finished_at', s.finished_at, 'total_cost_ms', s.total_cost_ms) order by s.n)
          from asyncflow.run_segments s where s.day = e.day and s.event_id = e.event_id), '[]'::jsonb)) else '{}'::jsonb end
        order by o.k)
      from asyncflow.run_events e
      join asyncflow.pipelines p on p.name = v_run.pipeline and p.version = v_run.version
      cross join lateral jsonb_array_elements_text(p.plan -> 'order') with ordinality o(node, k)
      where e.day = v_run.day and e.run_id = v_run.run_id and e.node = o.node), '[]'::jsonb),
    'traces', coalesce((select jsonb_agg(jsonb_build_object('trace_id', t.trace_id, 'event_id', t.event_id,
        'segment_id', t.segment_id, 'task_id', t.task_id, 'stage', t.stage, 'attempt', t.attempt, 'worker', t.worker,
        'outcome', t.outcome, 'error', t.error, 'started_at', t.started_at, 'cost_ms', t.cost_ms,
        'request', t.request, 'response', t.response) order by t.created_at, t.trace_id)
      from (select * from asyncflow.run_traces t where t.day = v_run.day and t.run_id = v_run.run_id
            order by t.created_at limit 1000) t), '[]'::jsonb),
    'callbacks', coalesce((select jsonb_agg(jsonb_build_object('callback_id', c.callback_id, 'kind', c.kind,
        'event_id', c.event_id, 'url', c.url, 'status', c.status, 'attempts', c.attempts, 'last_error', c.last_error,
        'next_attempt_at', c.next_attempt_at, 'give_up_at', c.give_up_at, 'delivered_at', c.delivered_at,
        'log', c.log, 'payload', c.payload) order by c.created_at, c.callback_id)
      from asyncflow.callbacks c where c.day = v_run.day and c.run_id = v_run.run_id), '[]'::jsonb));
end
$_$;

CREATE FUNCTION asyncflow.get_task(task_id text) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  p_task_id alias for $1;
  v_key record;
  v_task asyncflow.tasks;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    return null;
  end if;
  select * into v_task from asyncflow.tasks
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id;
  if not found then
    return null;
  end if;
  return asyncflow.task_json(v_task);
end
$_$;

CREATE FUNCTION asyncflow.graph_index(p_ends integer[], p_nodes integer, OUT edges integer[], OUT at integer[]) RETURNS record
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select array(select i::integer from unnest(p_ends) with ordinality u(k, i) order by k, i),
    array(select (1 + coalesce(sum(c) over (order by k rows between unbounded preceding and 1 preceding), 0))::integer
          from (select k, count(u.e) as c from generate_series(1, p_nodes + 1) k
                left join unnest(p_ends) u(e) on u.e = k group by k) x
          order by k)
$$;

CREATE FUNCTION asyncflow.graph_reach(p_root integer, p_nodes integer, p_at integer[], p_edges integer[], p_far integer[], p_live boolean[] DEFAULT NULL::boolean[]) RETURNS boolean[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
declare
  v_seen boolean[] := array_fill(false, array[p_nodes]);
  v_queue integer[] := array[p_root];
  v_head integer := 1;
  v_k integer;
  v_j integer;
  v_t integer;
begin
  v_seen[p_root] := true;
  while v_head <= cardinality(v_queue) loop
    v_k := v_queue[v_head];
    v_head := v_head + 1;
    for v_j in p_at[v_k] .. p_at[v_k + 1] - 1 loop
      continue when p_live is not null and not p_live[p_edges[v_j]];
      v_t := p_far[p_edges[v_j]];
      if not v_seen[v_t] then
        v_seen[v_t] := true;
        v_queue := v_queue || v_t;
      end if;
    end loop;
  end loop;
  return v_seen;
end
$$;

CREATE FUNCTION asyncflow.held_tasks(p_task_type text, p_owner text) RETURNS TABLE(task_id text, claim_seq integer, stage text, attempt integer, lease_until timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform asyncflow.check_type_name(p_task_type);
  if not exists (select 1 from asyncflow.task_types y where y.task_type = p_task_type) then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  return query
  select asyncflow.format_task_id(t.task_type, t.shard, t.id), t.claim_seq, t.stage, t.attempt, t.lease_until
  from asyncflow.tasks t
  where t.task_type = p_task_type and t.status = 'running' and t.owner = p_owner
  order by t.shard, t.id;
end
$$;

CREATE FUNCTION asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamp with time zone, p_single boolean) RETURNS text[]
    LANGUAGE plpgsql
    AS $_$
declare
  v_type asyncflow.task_types;
  v_now timestamptz := coalesce(p_now, now());
  v_max_bytes integer;
  v_pos integer;
  v_bad record;
  v_ids text[];
  v_keys text[];
  v_found text;
  v_i integer;
begin
  select * into v_type from asyncflow.task_types where task_type = p_task_type;
  if not found then
    perform asyncflow.check_type_name(p_task_type);
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  if p_tasks is null or jsonb_typeof(p_tasks) <> 'array' then
    perform asyncflow.raise_error('AF006', 'tasks must be a JSON array of objects');
  end if;
  select max_context_bytes into v_max_bytes from asyncflow.config;

  -- Anything that could be wrong? One scan of the elements (an error in it counts as "maybe").
  if pg_column_size(p_tasks) > v_max_bytes
    or coalesce(jsonb_path_exists(p_tasks, '$[*] ? (@.type() != "object"
          || (@.context.type() != "object" && @.context.type() != "null")
          || (@.priority.type() != "null" && (@.priority.type() != "number" || @.priority < 0
              || @.priority > 31104000 || @.priority != @.priority.floor()))
          || @.run_at.type() != "null"
          || (@.stage.type() != "null" && (@.stage.type() != "string"
              || !(@.stage like_regex "^[A-Za-z0-9_.:/-]{1,64}$")))
          || (@.idempotency_key.type() != "null" && (@.idempotency_key.type() != "string"
              || !(@.idempotency_key like_regex "^.{1,255}$" flag "s")))
          || (@.user_id.type() != "null" && (@.user_id.type() != "string"
              || !(@.user_id like_regex "^.{0,255}$" flag "s")))
          || (@.queue_key.type() != "null" && (@.queue_key.type() != "string"
              || !(@.queue_key like_regex "^.{1,255}$" flag "s")))
          || exists(@.keyvalue() ? (@.key != "context" && @.key != "priority" && @.key != "run_at"
              && @.key != "stage" && @.key != "idempotency_key" && @.key != "user_id"
              && @.key != "queue_key")))', silent => true), true)
  then
    select n, left(problem, 5) as code, substr(problem, 6) as why into v_bad from (
      select n, case
        when jsonb_typeof(e) <> 'object' then 'AF006must be a JSON object'
        when exists (select 1 from jsonb_object_keys(e) k
                     where k not in ('context', 'priority', 'run_at', 'stage', 'idempotency_key', 'user_id', 'queue_key'))
          then 'AF006' || format('has unknown field %L (known: context, priority, run_at, stage, idempotency_key, user_id, queue_key)',
            (select k from jsonb_object_keys(e) k
             where k not in ('context', 'priority', 'run_at', 'stage', 'idempotency_key', 'user_id', 'queue_key') limit 1))
        when jsonb_typeof(e -> 'context') not in ('object', 'null') then 'AF006context must be a JSON object'
        when jsonb_typeof(e -> 'priority') not in ('number', 'null')
          or (jsonb_typeof(e -> 'priority') = 'number'
              and ((e ->> 'priority')::numeric <> trunc((e ->> 'priority')::numeric)
                   or (e ->> 'priority')::numeric not between 0 and 31104000))
          then 'AF004' || format('priority must be an integer between 0 and 31104000 (seconds ahead), got %s', e -> 'priority')
        when pg_column_size(e -> 'context') > v_max_bytes
          then 'AF005' || format('context is too large: %s bytes, the limit is %s (asyncflow.config.max_context_bytes)',
            pg_column_size(e -> 'context'), v_max_bytes)
        when jsonb_typeof(e -> 'run_at') not in ('string', 'null') or (jsonb_typeof(e -> 'run_at') = 'string'
          and not asyncflow.is_timestamptz(e ->> 'run_at'))
          then 'AF006' || format('run_at must be a timestamp from 0002-01-01 to 9999-01-01 (UTC), got %s', e -> 'run_at')
        when jsonb_typeof(e -> 'stage') not in ('string', 'null') or (e ->> 'stage') !~ '^[A-Za-z0-9_.:/-]{1,64}$'
          then 'AF006' || format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', e -> 'stage')
        when jsonb_typeof(e -> 'idempotency_key') not in ('string', 'null') or length(e ->> 'idempotency_key') not between 1 and 255
          then 'AF006' || format('idempotency_key must be a string of 1 to 255 characters, got %s', e -> 'idempotency_key')
        when jsonb_typeof(e -> 'user_id') not in ('string', 'null') or length(e ->> 'user_id') > 255
          then 'AF006' || format('user_id must be a string of at most 255 characters, got %s', e -> 'user_id')
        when jsonb_typeof(e -> 'queue_key') not in ('string', 'null') or length(e ->> 'queue_key') not between 1 and 255
          then 'AF006' || format('queue_key must be a string of 1 to 255 characters, got %s', e -> 'queue_key')
      end as problem
      from jsonb_array_elements(p_tasks) with ordinality x(e, n)
    ) checked where problem is not null order by n limit 1;
    if found then
      perform asyncflow.raise_error(v_bad.code,
        case when p_single then v_bad.why else format('tasks[%s]: %s', v_bad.n - 1, v_bad.why) end);
    end if;
  end if;

  select end_pos into v_pos from asyncflow.positions where task_type = p_task_type;
  if not coalesce(jsonb_path_exists(p_tasks, '$[*].idempotency_key ? (@.type() != "null")', silent => true), true) then
    -- rows come out of jsonb_to_recordset in array order and take their ids in that order, so
    -- ordering the ids orders them as the input
    with inserted as (
      insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
        max_retry_interval, order_time, user_id, queue_key, context, created_at, updated_at)
      select p_task_type, v_pos, nextval(v_type.id_seq), coalesce(x.stage, v_type.initial_stage), 'pending',
        coalesce(x.priority, 0)::integer, v_type.max_retry_num, v_type.max_retry_interval,
        coalesce(x.run_at, v_now) - coalesce(x.priority, 0) * interval '1 second',
        x.user_id, x.queue_key, coalesce(nullif(x.context, 'null'::jsonb), '{}'::jsonb), v_now, v_now
      from jsonb_to_recordset(p_tasks) as x(context jsonb, priority numeric, run_at timestamptz, stage text, user_id text,
        queue_key text)
      returning id
    )
    select array_agg(asyncflow.format_task_id(p_task_type, v_pos, i.id) order by i.id) into v_ids from inserted i;
    perform asyncflow.wake(p_task_type);
    return coalesce(v_ids, '{}');
  end if;

  -- An insert racing a roll may land in the shard just closed; begin_pos is recomputed on every
  -- maintenance pass (advance_begin_pos), so such a task is found again (v_pos read above).

  with numbered as materialized (
    -- ids in input order
    select n, e, nextval(v_type.id_seq) as id
    from jsonb_array_elements(p_tasks) with ordinality x(e, n)
    order by n
  ), input as materialized (
    select n, e, id, e ->> 'idempotency_key' as ikey,
      row_number() over (partition by e ->> 'idempotency_key' order by n) as dup_rank,
      coalesce((e ->> 'priority')::integer, 0) as priority
    from numbered
  ), fresh_keys as (
    insert into asyncflow.idempotency_keys (task_type, idempotency_key, shard, id, created_at)
    select p_task_type, ikey, v_pos, id, v_now from input where ikey is not null and dup_rank = 1
    on conflict (task_type, idempotency_key) do nothing
    returning idempotency_key, id
  ), inserted as (
    insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
      max_retry_interval, order_time, user_id, queue_key, idempotency_key, context, created_at, updated_at)
    select p_task_type, v_pos, i.id, coalesce(i.e ->> 'stage', v_type.initial_stage), 'pending', i.priority,
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce((i.e ->> 'run_at')::timestamptz, v_now) - make_interval(secs => i.priority),
      i.e ->> 'user_id', i.e ->> 'queue_key', i.ikey, coalesce(nullif(i.e -> 'context', 'null'::jsonb), '{}'::jsonb), v_now, v_now
    from input i
    where i.ikey is null or i.id in (select id from fresh_keys)
    returning id
  )
  select array_agg(case
      when i.ikey is null or f.id is not null then asyncflow.format_task_id(p_task_type, v_pos, i.id)
      else (select asyncflow.format_task_id(p_task_type, k.shard, k.id) from asyncflow.idempotency_keys k
            where k.task_type = p_task_type and k.idempotency_key = i.ikey)
    end order by i.n),
    array_agg(i.ikey order by i.n)
  into v_ids, v_keys
  from input i
  left join fresh_keys f on f.id = i.id;

  -- A key repeated inside this call, or created by a transaction that committed while this
  -- statement waited on it, is not visible in the statement's snapshot: look again.
  if v_ids is not null and array_position(v_ids, null) is not null then
    for v_i in 1 .. array_length(v_ids, 1) loop
      if v_ids[v_i] is null then
        select asyncflow.format_task_id(p_task_type, k.shard, k.id) into v_found
        from asyncflow.idempotency_keys k where k.task_type = p_task_type and k.idempotency_key = v_keys[v_i];
        v_ids[v_i] := v_found;
        if v_found is null then
          raise exception using errcode = '40001',
            message = format('idempotency key %L is being created by a concurrent transaction; try again', v_keys[v_i]);
        end if;
      end if;
    end loop;
  end if;

  perform asyncflow.wake(p_task_type);
  return coalesce(v_ids, '{}');
end
$_$;

CREATE FUNCTION asyncflow.is_integral(p_value jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select (p_value #>> '{}')::numeric = trunc((p_value #>> '{}')::numeric)
$$;

CREATE FUNCTION asyncflow.is_jsonpath(p_text text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
begin
  perform p_text::jsonpath;
  return true;
exception when others then
  return false;
end
$$;

CREATE FUNCTION asyncflow.is_timestamptz(p_text text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
begin
  return p_text::timestamptz between '0002-01-01 00:00:00+00' and '9999-01-01 00:00:00+00';
exception when others then
  return false;
end
$$;

CREATE FUNCTION asyncflow.list_pipelines() RETURNS SETOF jsonb
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select jsonb_build_object('name', p.name, 'version', p.version, 'status', p.status,
    'nodes', jsonb_array_length(p.plan -> 'order'), 'created_at', p.created_at, 'updated_at', p.updated_at)
  from asyncflow.pipelines p order by p.name, p.version desc
$$;

CREATE FUNCTION asyncflow.list_runs(pipeline text DEFAULT NULL::text, status text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before text DEFAULT NULL::text) RETURNS SETOF jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_before asyncflow.runs;
begin
  if status is not null and status not in ('scheduled', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled') then
    perform asyncflow.raise_error('AF006', format(
      'status must be one of scheduled, running, succeeded, failed, timed_out, cancelled, got %L', status));
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', 'limit must be between 1 and 1000');
  end if;
  if p_before is not null then
    v_before := asyncflow.wf_get_run(p_before);
    if v_before.run_id is null then
      perform asyncflow.raise_error('AF012', format('unknown run %L', p_before));
    end if;
  end if;
  return query
  select asyncflow.run_json(r) from asyncflow.runs r
  where ($1 is null or r.pipeline = $1) and ($2 is null or r.status::text = $2)
    and (v_before.run_id is null or (r.created_at, r.run_id) < (v_before.created_at, v_before.run_id))
  order by r.created_at desc, r.run_id desc
  limit p_limit;
end
$_$;

CREATE FUNCTION asyncflow.list_tasks(p_task_type text DEFAULT NULL::text, p_status asyncflow.task_status DEFAULT NULL::asyncflow.task_status, p_stage text DEFAULT NULL::text, p_user_id text DEFAULT NULL::text, p_after text DEFAULT NULL::text, p_limit integer DEFAULT 100) RETURNS SETOF jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_after record;
  v_after_type text;
  v_after_id bigint;
begin
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', 'limit must be between 1 and 1000');
  end if;
  if p_after is not null then
    select * into v_after from asyncflow.parse_task_id(p_after);
    if v_after.task_type is null then
      perform asyncflow.raise_error('AF006', format('after must be a task id, got %L', p_after));
    end if;
    v_after_type := v_after.task_type;
    v_after_id := v_after.id;
  end if;
  return query
  select asyncflow.task_json(t) from asyncflow.tasks t
  where (p_task_type is null or t.task_type = p_task_type)
    and (p_status is null or t.status = p_status)
    and (p_stage is null or t.stage = p_stage)
    and (p_user_id is null or t.user_id = p_user_id)
    and (v_after_type is null or (t.task_type, t.id) > (v_after_type, v_after_id))
  order by t.task_type, t.id
  limit p_limit;
end
$$;

CREATE FUNCTION asyncflow.next_due(p_task_type text) RETURNS timestamp with time zone
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select min(order_time) from asyncflow.tasks
  where task_type = p_task_type and status = 'pending'
    and shard >= (select begin_pos from asyncflow.positions where task_type = p_task_type)
    and not (select y.paused from asyncflow.task_types y where y.task_type = p_task_type)
$$;

CREATE FUNCTION asyncflow.parse_task_id(p_task_id text, OUT task_type text, OUT shard integer, OUT id bigint) RETURNS record
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  select split_part(p_task_id, '-', 1), split_part(p_task_id, '-', 2)::integer, split_part(p_task_id, '-', 3)::bigint
  where p_task_id ~ '^[a-z][a-z0-9_]{0,39}-[1-9][0-9]{0,8}-[1-9][0-9]{0,17}$'
$_$;

CREATE FUNCTION asyncflow.pipeline_error(p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  -- (V37) cut: the message may repeat a name from the definition, of any size
  raise exception using errcode = 'AF010', message = asyncflow.shorten(p_message);
end
$$;

CREATE TABLE asyncflow.pipelines (
    name text NOT NULL,
    version integer NOT NULL,
    status text NOT NULL,
    definition jsonb NOT NULL,
    plan jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT pipelines_name_check CHECK ((name ~ '^[a-z][a-z0-9_]{0,39}$'::text)),
    CONSTRAINT pipelines_status_check CHECK ((status = ANY (ARRAY['draft'::text, 'active'::text, 'retired'::text]))),
    CONSTRAINT pipelines_version_check CHECK ((version >= 1))
);

CREATE FUNCTION asyncflow.pipeline_json(p asyncflow.pipelines) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select jsonb_build_object('name', p.name, 'version', p.version, 'status', p.status, 'definition', p.definition,
    'plan', p.plan, 'created_at', p.created_at, 'updated_at', p.updated_at)
$$;

CREATE FUNCTION asyncflow.plan_step_limit() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select 300 $$;

CREATE FUNCTION asyncflow.plan_steps(p_plan jsonb, OUT plan jsonb, OUT path text[]) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $$
declare
  v_names text[] := array(select jsonb_array_elements_text(p_plan -> 'order'));
  v_n integer := cardinality(v_names);
  v_types text[];
  v_weight integer[];
  v_fi integer[];
  v_ti integer[];
  v_out integer[];
  v_out_at integer[];
  v_in integer[];
  v_in_at integer[];
  v_count integer[];
  v_topo integer[];
  v_head integer := 1;
  v_k integer;
  v_j integer;
  v_i integer;
  -- per node: may a router's choice skip it; does the call go on from it; the steps of the
  -- longest chain before it, and through it; the node before it on that chain; the steps of the
  -- longest chain after it
  v_skippable boolean[];
  v_carries boolean[];
  v_before integer[];
  v_through integer[];
  v_prev integer[];
  v_after integer[];
  v_last integer := 1;
  v_around jsonb := '{}';
  -- (V39) per node: its place in v_topo; its immediate post-dominator (the first node every path
  -- from it to the end passes); whether the call that reaches it live always reaches it live
  v_pos integer[];
  v_ipdom integer[];
  v_a integer;
  v_d integer;
  v_live boolean[];
begin
  select array_agg(d ->> 'type' order by k),
    array_agg(case when d ->> 'type' in ('task', 'callback') then 1
      when d ->> 'type' = 'pipeline' then 5 + coalesce((select (p.plan ->> 'steps')::integer from asyncflow.pipelines p
        where p.name = d ->> 'pipeline' and case when d ->> 'version' is null then p.status = 'active'
          else p.version = (d ->> 'version')::numeric end), 0)
      else 3 end order by k)
  into v_types, v_weight
  from unnest(v_names) with ordinality u(n, k), jsonb_extract_path(p_plan, 'nodes', n) d;
  select coalesce(array_agg(f.k::integer order by f.k, e.o), '{}'), coalesce(array_agg(t.k::integer order by f.k, e.o), '{}')
  into v_fi, v_ti
  from unnest(v_names) with ordinality f(n, k)
  cross join lateral jsonb_array_elements(p_plan -> 'nodes' -> f.n -> 'out') with ordinality e(edge, o)
  join unnest(v_names) with ordinality t(n, k) on t.n = e.edge ->> 'to';
  select * into v_out, v_out_at from asyncflow.graph_index(v_fi, v_n);
  select * into v_in, v_in_at from asyncflow.graph_index(v_ti, v_n);

  -- topological order (Kahn; the plan has no cycle)
  v_count := array(select v_in_at[k + 1] - v_in_at[k] from generate_series(1, v_n) k);
  v_topo := array(select k from generate_series(1, v_n) k where v_count[k] = 0);
  while v_head <= cardinality(v_topo) loop
    v_k := v_topo[v_head];
    v_head := v_head + 1;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      v_count[v_i] := v_count[v_i] - 1;
      if v_count[v_i] = 0 then
        v_topo := v_topo || v_i;
      end if;
    end loop;
  end loop;

  -- (V39) Which nodes a router's choice may skip. A node is skipped only when every in-edge is
  -- dead (wf_arrive), and V36 counted as skippable every node below a router, also a node with a
  -- live in-edge whatever the routers choose: a join of all of a router's branches, or one fed by
  -- a node no router can skip. Its task nodes then carried the chain on, and a valid pipeline of
  -- about 300 task nodes after such a join was refused (and parents of it counted its steps).
  -- Now a node cannot be skipped (is live) when it is start, when a live node that is not a router
  -- has an edge to it (every such edge is taken), or when it post-dominates a live node (from a
  -- live node some branch is always taken, on to the end, and every branch passes it).
  v_pos := array_fill(0, array[v_n]);
  for v_head in 1 .. cardinality(v_topo) loop
    v_pos[v_topo[v_head]] := v_head;
  end loop;
  -- immediate post-dominators, from the end back (Cooper, Harvey and Kennedy's intersection; in a
  -- DAG whose every node reaches the end, which is last in v_topo, one pass suffices)
  v_ipdom := array_fill(null::integer, array[v_n]);
  for v_head in reverse cardinality(v_topo) .. 1 loop
    v_k := v_topo[v_head];
    v_d := null;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_a := v_ti[v_out[v_j]];
      if v_d is null then
        v_d := v_a;
        continue;
      end if;
      while v_a <> v_d loop
        while v_pos[v_a] < v_pos[v_d] loop
          v_a := v_ipdom[v_a];
        end loop;
        while v_pos[v_d] < v_pos[v_a] loop
          v_d := v_ipdom[v_d];
        end loop;
      end loop;
    end loop;
    v_ipdom[v_k] := v_d;
  end loop;
  v_live := array_fill(false, array[v_n]);
  if v_n > 0 then
    v_live[v_topo[1]] := true;
  end if;
  foreach v_k in array v_topo loop
    continue when not v_live[v_k];
    if v_types[v_k] <> 'router' then
      for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
        v_live[v_ti[v_out[v_j]]] := true;
      end loop;
    end if;
    -- a node already live walks its own post-dominators when its turn comes
    v_i := v_ipdom[v_k];
    while v_i is not null and not v_live[v_i] loop
      v_live[v_i] := true;
      v_i := v_ipdom[v_i];
    end loop;
  end loop;

  v_skippable := array(select not v_live[k] from generate_series(1, v_n) k);
  v_carries := array_fill(false, array[v_n]);
  v_before := array_fill(0, array[v_n]);
  v_through := array_fill(0, array[v_n]);
  v_prev := array_fill(null::integer, array[v_n]);
  v_after := array_fill(0, array[v_n]);
  foreach v_k in array v_topo loop
    v_through[v_k] := v_before[v_k] + v_weight[v_k];
    v_carries[v_k] := v_types[v_k] not in ('task', 'callback') or v_skippable[v_k];
    if v_through[v_k] > v_through[v_last] then
      v_last := v_k;
    end if;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      if v_carries[v_k] and v_through[v_k] > v_before[v_i] then
        v_before[v_i] := v_through[v_k];
        v_prev[v_i] := v_k;
      end if;
    end loop;
  end loop;
  for v_head in reverse cardinality(v_topo) .. 1 loop
    v_k := v_topo[v_head];
    if v_carries[v_k] then
      for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
        v_i := v_ti[v_out[v_j]];
        v_after[v_k] := greatest(v_after[v_k], v_weight[v_i] + v_after[v_i]);
      end loop;
    end if;
    if v_types[v_k] = 'pipeline' then
      v_around := v_around || jsonb_build_object(v_names[v_k], v_before[v_k] + 5 + v_after[v_k]);
    end if;
  end loop;

  path := '{}';
  v_k := v_last;
  while v_k is not null loop
    path := v_names[v_k] || path;
    v_k := v_prev[v_k];
  end loop;
  plan := p_plan || jsonb_build_object('steps', v_through[v_last],
    'nodes', (select jsonb_object_agg(x.n, case when v_around ? x.n
      then x.d || jsonb_build_object('steps_around', v_around -> x.n) else x.d end)
      from jsonb_each(p_plan -> 'nodes') x(n, d)));
end
$$;

CREATE FUNCTION asyncflow.put_pipeline(name text, definition jsonb, status text DEFAULT 'active'::text) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  p_name alias for $1;
  p_definition alias for $2;
  p_status alias for $3;
  v_plan jsonb;
  v_latest asyncflow.pipelines;
  v_row asyncflow.pipelines;
  v_created boolean := true;
begin
  if p_name is null or p_name !~ '^[a-z][a-z0-9_]{0,39}$' then
    perform asyncflow.pipeline_error(format('invalid pipeline name %s: it must match ^[a-z][a-z0-9_]{0,39}$',
      coalesce(quote_literal(p_name), 'null')));
  end if;
  if p_status is null or p_status not in ('active', 'draft') then
    perform asyncflow.raise_error('AF006', format('status must be active or draft, got %s', coalesce(quote_literal(p_status), 'null')));
  end if;
  v_plan := asyncflow.compile_pipeline(p_name, p_definition);
  perform pg_advisory_xact_lock(16714, hashtext(p_name));
  -- the engine hears of the tasks of these functions (see wf_watch_type)
  perform asyncflow.wf_watch_type(f) from (
    select distinct v ->> 'function' as f from jsonb_each(v_plan -> 'nodes') x(k, v) where v ? 'function') fs;
  select * into v_latest from asyncflow.pipelines p where p.name = p_name order by p.version desc limit 1;
  if found and v_latest.definition = p_definition then
    v_created := false;
    v_row := v_latest;
  else
    insert into asyncflow.pipelines (name, version, status, definition, plan)
    values (p_name, coalesce(v_latest.version, 0) + 1, 'draft', p_definition, v_plan)
    returning * into v_row;
  end if;
  if p_status = 'active' and v_row.status <> 'active' then
    v_row := asyncflow.set_pipeline_status(p_name, v_row.version, 'active');
  end if;
  return asyncflow.pipeline_json(v_row) || jsonb_build_object('created', v_created);
end
$_$;

CREATE FUNCTION asyncflow.queue_keys(p_task_type text, p_after text DEFAULT NULL::text, p_limit integer DEFAULT 100) RETURNS TABLE(queue_key text, ready bigint, delayed bigint, running bigint, oldest_ready_age double precision, concurrency integer)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_type asyncflow.task_types;
begin
  select * into v_type from asyncflow.task_types y where y.task_type = p_task_type collate "default";
  if not found then
    perform asyncflow.check_type_name(p_task_type);
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  if not v_type.fair_queues then
    perform asyncflow.raise_error('AF006', format('task type %L does not have fair_queues: its tasks are not '
      'kept by queue key', v_type.task_type));
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')));
  end if;
  -- the name passed check_type_name when the type was registered; p_after and p_limit go as values
  return query execute format($q$
    -- each walk stops after $2 keys: the first $2 keys of the union are among the first $2 of each
    with recursive pending_keys(k, n) as (
      (select coalesce(t.queue_key, ''), 1 from asyncflow.%1$I t
       where t.status = 'pending' and coalesce(t.queue_key, '') %2$s $1 order by 1 limit 1)
      union all
      select (select coalesce(t.queue_key, '') from asyncflow.%1$I t
              where t.status = 'pending' and coalesce(t.queue_key, '') > p.k order by 1 limit 1), p.n + 1
      from pending_keys p where p.k is not null and p.n < $2
    ), running_keys(k, n) as (
      (select coalesce(t.queue_key, ''), 1 from asyncflow.%1$I t
       where t.status = 'running' and coalesce(t.queue_key, '') %2$s $1 order by 1 limit 1)
      union all
      select (select coalesce(t.queue_key, '') from asyncflow.%1$I t
              where t.status = 'running' and coalesce(t.queue_key, '') > r.k order by 1 limit 1), r.n + 1
      from running_keys r where r.k is not null and r.n < $2
    ), keys as (
      select u.k from (select k from pending_keys union select k from running_keys) u
      where u.k is not null order by u.k limit $2
    )
    select k.k, p.ready, p.delayed, r.running,
      coalesce(extract(epoch from (now() - p.oldest)), 0)::double precision,
      coalesce(l.concurrency, $3)
    from keys k
    cross join lateral (
      select count(*) filter (where t.order_time <= now()) as ready,
        count(*) filter (where t.order_time > now()) as delayed,
        min(t.order_time) filter (where t.order_time <= now()) as oldest
      from asyncflow.%1$I t where t.status = 'pending' and coalesce(t.queue_key, '') = k.k
    ) p
    cross join lateral (
      select count(*) as running from asyncflow.%1$I t where t.status = 'running' and coalesce(t.queue_key, '') = k.k
    ) r
    left join asyncflow.queue_limits l on l.task_type = %3$L and l.queue_key = k.k
    order by k.k
    $q$, 'tasks_' || v_type.task_type, case when p_after is null then '>=' else '>' end, v_type.task_type)
  using coalesce(p_after, '') collate "default", p_limit, v_type.queue_concurrency;
end
$_$;

CREATE FUNCTION asyncflow.raise_error(p_code text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  -- (V37) cut: the message may repeat a caller's value of any size
  raise exception using errcode = p_code, message = asyncflow.shorten(p_message);
end
$$;

CREATE FUNCTION asyncflow.record_callback(p_callback_id text, p_attempt integer, p_http_status integer, p_error text, p_cost_ms integer, p_give_up boolean DEFAULT false, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_cb asyncflow.callbacks;
begin
  update asyncflow.callbacks c set
    status = case when p_error is null then 'delivered' when p_give_up or v_now >= c.give_up_at then 'failed'
      else 'pending' end,
    delivered_at = case when p_error is null then v_now end,
    last_error = left(p_error, 500),
    next_attempt_at = case when p_error is null then c.next_attempt_at
      else v_now + make_interval(secs => least(power(2, least(c.attempts - 1, 30)),
        (select callback_max_interval from asyncflow.config))) end,
    owner = null,
    log = case when jsonb_array_length(c.log) >= 50 then c.log - 0 else c.log end || jsonb_build_array(jsonb_strip_nulls(
      jsonb_build_object('attempt', p_attempt, 'at', v_now, 'http_status', p_http_status, 'error', left(p_error, 500),
        'cost_ms', p_cost_ms, 'given_up', case when p_error is not null and p_give_up then true end))),
    updated_at = v_now
  where c.day = asyncflow.run_day(p_callback_id) and c.callback_id = p_callback_id and c.status = 'pending'
    and c.attempts = p_attempt
  returning * into v_cb;
  if not found then
    return null;
  end if;
  if v_cb.kind = 'node' and v_cb.status = 'delivered' then
    perform asyncflow.wf_complete_event(v_cb.event_id, jsonb_build_object('delivered_at', v_now, 'url', v_cb.url,
      'http_status', p_http_status, 'attempts', v_cb.attempts), v_now);
  elsif v_cb.kind = 'node' and v_cb.status = 'failed' then
    perform asyncflow.wf_fail_event(v_cb.event_id, case when p_give_up
      then format('callback to %s not delivered: %s', v_cb.url, p_error)
      else format('callback to %s not delivered after %s attempts: %s', v_cb.url, v_cb.attempts, p_error) end, v_now);
  end if;
  return v_cb.status;
end
$$;

CREATE FUNCTION asyncflow.refresh_enqueue_info(p_task_type text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  insert into asyncflow.enqueue_info as e (task_type, end_pos, id_seq, initial_stage, max_retry_num,
    max_retry_interval, max_context_bytes)
  select y.task_type, p.end_pos, y.id_seq, y.initial_stage, y.max_retry_num, y.max_retry_interval,
    c.max_context_bytes
  from asyncflow.task_types y
  join asyncflow.positions p on p.task_type = y.task_type
  cross join asyncflow.config c
  where y.task_type = p_task_type
  for share of y, c
  on conflict (task_type) do update set end_pos = excluded.end_pos, id_seq = excluded.id_seq,
    initial_stage = excluded.initial_stage, max_retry_num = excluded.max_retry_num,
    max_retry_interval = excluded.max_retry_interval, max_context_bytes = excluded.max_context_bytes
$$;

CREATE FUNCTION asyncflow.register_task_type(task_type text, settings jsonb DEFAULT '{}'::jsonb) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
#variable_conflict use_column
declare
  p_task_type alias for $1;
  p_settings jsonb := coalesce($2, '{}');
  v_type asyncflow.task_types;
  v_now timestamptz := now();
begin
  perform asyncflow.check_type_name(p_task_type);
  perform asyncflow.check_settings(p_settings);
  perform 1 from asyncflow.task_types where task_type = p_task_type for update;
  if not found then
    perform pg_advisory_xact_lock(16711, hashtext(p_task_type));
    perform 1 from asyncflow.task_types where task_type = p_task_type for update;
  end if;
  if not found then
    perform asyncflow.check_new_type_name(p_task_type);
    -- DDL waits at most this long for a lock; the caller gets an error and can try again.
    perform set_config('lock_timeout', '5s', true);
    execute format('create sequence asyncflow.%I', 'tasks_' || p_task_type || '_id_seq');
    insert into asyncflow.task_types (task_type, id_seq, created_at, updated_at)
    values (p_task_type, ('asyncflow.' || quote_ident('tasks_' || p_task_type || '_id_seq'))::regclass, v_now, v_now);
    execute format('create table asyncflow.%I (like asyncflow.tasks including defaults) partition by list (shard)',
      'tasks_' || p_task_type);
    execute format('alter table asyncflow.%I add constraint %I primary key (id, shard)',
      'tasks_' || p_task_type, 'tasks_' || p_task_type || '_pkey');
    execute format('create index %I on asyncflow.%I (order_time) where status = ''pending''',
      'tasks_' || p_task_type || '_ready', 'tasks_' || p_task_type);
    execute format('create index %I on asyncflow.%I (lease_until) where status = ''running''',
      'tasks_' || p_task_type || '_running', 'tasks_' || p_task_type);
    execute format('alter table asyncflow.tasks attach partition asyncflow.%I for values in (%L)',
      'tasks_' || p_task_type, p_task_type);
    perform asyncflow.create_shard(p_task_type, 1, v_now);
    insert into asyncflow.positions (task_type, updated_at) values (p_task_type, v_now);
  end if;
  update asyncflow.task_types set
    schedule_limit = coalesce((p_settings ->> 'schedule_limit')::numeric::integer, schedule_limit),
    schedule_interval = coalesce((p_settings ->> 'schedule_interval')::double precision, schedule_interval),
    max_processing_time = coalesce((p_settings ->> 'max_processing_time')::numeric::integer, max_processing_time),
    max_retry_num = coalesce((p_settings ->> 'max_retry_num')::numeric::integer, max_retry_num),
    max_retry_interval = coalesce((p_settings ->> 'max_retry_interval')::numeric::integer, max_retry_interval),
    shard_max_rows = coalesce((p_settings ->> 'shard_max_rows')::numeric::bigint, shard_max_rows),
    retention = coalesce((p_settings ->> 'retention')::numeric::integer, retention),
    concurrency = case when p_settings ? 'concurrency' then (p_settings ->> 'concurrency')::numeric::integer else concurrency end,
    paused = coalesce((p_settings ->> 'paused')::boolean, paused),
    initial_stage = coalesce(p_settings ->> 'initial_stage', initial_stage),
    fair_queues = coalesce((p_settings ->> 'fair_queues')::boolean, fair_queues),
    queue_concurrency = case when p_settings ? 'queue_concurrency'
      then (p_settings ->> 'queue_concurrency')::numeric::integer else queue_concurrency end,
    updated_at = v_now
  where task_type = p_task_type
  returning * into v_type;
  -- (V41) the key indexes follow fair_queues; the type's row is locked above, so two
  -- registrations never build or drop them at once
  if p_settings ? 'fair_queues' then
    perform asyncflow.set_queue_indexes(p_task_type, v_type.fair_queues);
  end if;
  return asyncflow.task_type_json(v_type);
end
$_$;

CREATE FUNCTION asyncflow.report_task_arrays(p_owner text, p_task_ids text[], p_claim_seqs integer[], p_outcomes text[], p_stages text[] DEFAULT NULL::text[], p_contexts jsonb[] DEFAULT NULL::jsonb[], p_results jsonb[] DEFAULT NULL::jsonb[], p_errors text[] DEFAULT NULL::text[], p_retries boolean[] DEFAULT NULL::boolean[], p_delays double precision[] DEFAULT NULL::double precision[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
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
      || 'select u.n, u.task_id, false as accepted, null::asyncflow.task_status as status, null::timestamptz as lease_until '
      || 'from unnest($2) with ordinality u(task_id, n) where split_part(u.task_id, ''-'', 1) <> all ($12)) x order by n'
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now, v_types;
  end if;
end
$_$;

CREATE FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS $_$
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
      -- in numeric, which holds any JSON number: the double precision cast below cannot
      when (e ->> 'delay')::numeric not between 0 and 31536000
        then format('delay must be a number of seconds between 0 and 31536000, got %s', e -> 'delay')
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
    array_agg(round(x.delay, 6)::double precision) as delays
  into v
  from rows from (jsonb_to_recordset(p_reports) as (task_id text, claim_seq integer, outcome text, stage text,
    context jsonb, result jsonb, error text, retry boolean, delay numeric))
    with ordinality as x(task_id, claim_seq, outcome, stage, context, result, error, retry, delay, n);
  return query select * from asyncflow.report_task_arrays(p_owner, coalesce(v.task_ids, '{}'),
    coalesce(v.claim_seqs, '{}'), coalesce(v.outcomes, '{}'), v.stages, v.contexts, v.results, v.errors, v.retries,
    v.delays, p_now);
end
$_$;

CREATE FUNCTION asyncflow.rescue_expired(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 1000) RETURNS TABLE(task_id text, task_type text, status asyncflow.task_status)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_now timestamptz := coalesce(p_now, now());
  v_ids text[];
  v_types text[];
  v_statuses asyncflow.task_status[];
begin
  with expired as (
    select task_type, shard, id from asyncflow.tasks
    where status = 'running' and lease_until < v_now
    limit p_limit
    for update skip locked
  ), changed as (
    update asyncflow.tasks t set
      status = case when t.attempt > t.max_retry_num then 'failed' else 'pending' end::asyncflow.task_status,
      order_time = case when t.attempt > t.max_retry_num then t.order_time
        else v_now + asyncflow.retry_backoff(t.attempt, t.max_retry_interval) end,
      retry_count = t.retry_count + 1,
      last_error = format('lease expired: no report from worker %s by %s', t.owner, t.lease_until),
      finished_at = case when t.attempt > t.max_retry_num then v_now end,
      schedule_log = asyncflow.append_log(t.schedule_log, jsonb_build_object(
        'worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
        'cost_ms', round(extract(epoch from (v_now - t.claimed_at)) * 1000), 'outcome', 'rescued',
        'error', format('lease expired at %s', t.lease_until))),
      owner = null, lease_until = null, updated_at = v_now
    from expired e
    where t.task_type = e.task_type and t.shard = e.shard and t.id = e.id
    returning asyncflow.format_task_id(t.task_type, t.shard, t.id) as task_id, t.task_type, t.status
  )
  select array_agg(c.task_id), array_agg(c.task_type), array_agg(c.status)
  into v_ids, v_types, v_statuses
  from changed c;

  insert into asyncflow.type_counters as k (task_type, slot, rescued, failed)
  select u.type_name, pg_backend_pid() % 16, count(*), count(*) filter (where u.st = 'failed')
  from unnest(v_types, v_statuses) u(type_name, st) group by u.type_name
  on conflict (task_type, slot) do update set rescued = k.rescued + excluded.rescued, failed = k.failed + excluded.failed;

  perform asyncflow.wake(d.type_name)
  from (select distinct u.type_name from unnest(v_types, v_statuses) u(type_name, st) where u.st = 'pending') d;
  return query select * from unnest(v_ids, v_types, v_statuses);
end
$$;

CREATE FUNCTION asyncflow.retry_backoff(p_attempt integer, p_max integer) RETURNS interval
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select make_interval(secs => case
    when p_max > 0 then least(power(2::double precision, least(greatest(p_attempt, 1) - 1, 40)), p_max::double precision)
    when p_max < 0 then abs(p_max)::double precision
    else 0 end)
$$;

CREATE FUNCTION asyncflow.retry_node(run_id text, node text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
#variable_conflict use_column
declare
  v_run asyncflow.runs := asyncflow.wf_run_for_update($1);
  v_now timestamptz := coalesce(p_now, now());
  v_event asyncflow.run_events;
  v_other asyncflow.run_events;
begin
  select * into v_event from asyncflow.run_events e
  where e.day = v_run.day and e.event_id = v_run.run_id || '_' || $2 for update;
  if not found then
    perform asyncflow.wf_run_error('AF012', format('run %s has no node %s', v_run.run_id, coalesce(quote_literal($2), 'null')));
  end if;
  if v_event.status <> 'failed' then
    perform asyncflow.wf_run_error('AF013', format('node %s of run %s is %s: only a failed node can be retried',
      $2, v_run.run_id, v_event.status));
  end if;
  if v_run.status not in ('failed', 'timed_out') or v_run.retried_by is not null then
    perform asyncflow.wf_run_error('AF013', format('run %s is %s%s: a node can be retried only in a failed run',
      v_run.run_id, v_run.status, coalesce(' and was retried as ' || v_run.retried_by, '')));
  end if;
  if v_run.parent_event is not null then
    perform asyncflow.wf_run_error('AF013', format('run %s is a sub-pipeline run of event %s: retry that node instead',
      v_run.run_id, v_run.parent_event));
  end if;
  update asyncflow.runs r set status = 'running', result = null, error = null, finished_at = null, total_cost_ms = null,
    updated_at = v_now, deadline = v_now + make_interval(secs => (asyncflow.wf_plan(v_run) ->> 'timeout')::double precision)
  where r.day = v_run.day and r.run_id = v_run.run_id
  returning * into v_run;
  -- nodes that were only waiting wait again; the ones that were working run again
  update asyncflow.run_events e set status = 'waiting', cancelled_from = null, finished_at = null, updated_at = v_now
  where e.day = v_run.day and e.run_id = v_run.run_id and e.status = 'cancelled' and e.cancelled_from = 'waiting';
  for v_other in
    select * from asyncflow.run_events e
    where e.day = v_run.day and e.run_id = v_run.run_id and e.status = 'cancelled' order by e.event_id
  loop
    perform asyncflow.wf_rerun_event(v_run, v_other, v_now);
    -- (V32) a node that fails again at once fails the run again: nothing more is started in it
    exit when (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) <> 'running';
  end loop;
  if (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) = 'running' then
    perform asyncflow.wf_rerun_event(v_run, v_event, v_now);
  end if;
  -- true when the run is under way again; false when it failed again while its nodes restarted
  return (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) = 'running';
end
$_$;

CREATE FUNCTION asyncflow.retry_run(run_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
#variable_conflict use_column
declare
  v_run asyncflow.runs := asyncflow.wf_run_for_update($1);
  v_now timestamptz := coalesce(p_now, now());
  v_new text;
begin
  if v_run.status not in ('failed', 'timed_out', 'cancelled') or v_run.retried_by is not null then
    perform asyncflow.wf_run_error('AF013', format('run %s is %s%s: only a failed, timed-out or cancelled run can be retried',
      v_run.run_id, v_run.status, coalesce(' and was retried as ' || v_run.retried_by, '')));
  end if;
  if v_run.parent_event is not null then
    perform asyncflow.wf_run_error('AF013', format('run %s is a sub-pipeline run of event %s: retry that node instead',
      v_run.run_id, v_run.parent_event));
  end if;
  v_new := asyncflow.wf_new_run(v_run.pipeline, v_run.version, v_run.input, v_run.notify_url, v_run.notify_key, null,
    null, 0, v_run.attempt + 1, v_run.run_id, v_now);
  update asyncflow.runs set retried_by = v_new, updated_at = v_now where day = v_run.day and run_id = v_run.run_id;
  return v_new;
end
$_$;

CREATE FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  p_task_id alias for $1;
  v_key record;
  v_now timestamptz := coalesce(p_now, now());
  v_ref text;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
  -- (V40) before the task turns pending: a begin_pos pass waits for this transaction, or this
  -- one for the pass, and whichever runs second sees what the first did
  perform 1 from asyncflow.positions where task_type = v_key.task_type for key share;
  select run_ref into v_ref from asyncflow.tasks
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id;
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
  update asyncflow.positions set begin_pos = v_key.shard, updated_at = v_now
  where task_type = v_key.task_type and begin_pos > v_key.shard;
  -- (V34) its own shard reopens; the shards between it and begin_pos stay as they are (each is
  -- closed or open by what it holds)
  update asyncflow.shards set closed_at = null
  where task_type = v_key.task_type and shard = v_key.shard and closed_at is not null;
  perform asyncflow.wake(v_key.task_type);
  return true;
end
$_$;

CREATE FUNCTION asyncflow.roll_shard(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_max_rows bigint;
  v_end integer;
  v_rows bigint;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  select shard_max_rows into v_max_rows from asyncflow.task_types where task_type = p_task_type;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  -- (V40) as in advance_begin_pos: a retry_task's transaction holds this row; past 1 s, no roll
  -- this time
  begin
    perform set_config('lock_timeout', '1s', true);
    select end_pos into v_end from asyncflow.positions where task_type = p_task_type for update;
    perform set_config('lock_timeout', v_lock_timeout, true);
  exception when lock_not_available then
    perform set_config('lock_timeout', v_lock_timeout, true);
    return null;
  end;
  select max(id) - min(id) + 1 into v_rows from asyncflow.tasks where task_type = p_task_type and shard = v_end;
  if coalesce(v_rows, 0) < v_max_rows then
    return null;
  end if;
  perform set_config('lock_timeout', '5s', true);
  perform asyncflow.create_shard(p_task_type, v_end + 1, v_now);
  perform set_config('lock_timeout', v_lock_timeout, true);
  update asyncflow.positions set end_pos = v_end + 1, updated_at = v_now where task_type = p_task_type;
  return v_end + 1;
end
$$;

CREATE FUNCTION asyncflow.run_day(p_id text) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select case when p_id ~ '^r[0-9]{8}-[0-9a-f]{32}' then
    case when substr(p_id, 2, 4)::integer >= 1 and substr(p_id, 6, 2)::integer between 1 and 12 then
      case when substr(p_id, 8, 2)::integer between 1 and extract(day from make_date(substr(p_id, 2, 4)::integer,
          substr(p_id, 6, 2)::integer, 1) + interval '1 month' - interval '1 day')::integer
        then make_date(substr(p_id, 2, 4)::integer, substr(p_id, 6, 2)::integer, substr(p_id, 8, 2)::integer)
      end
    end
  end
$$;

CREATE TABLE asyncflow.runs (
    day date NOT NULL,
    run_id text NOT NULL,
    pipeline text NOT NULL,
    version integer NOT NULL,
    status asyncflow.run_status NOT NULL,
    input jsonb NOT NULL,
    result jsonb,
    error text,
    notify_url text,
    notify_key text,
    parent_event text,
    depth integer DEFAULT 0 NOT NULL,
    attempt integer DEFAULT 1 NOT NULL,
    retry_of text,
    retried_by text,
    run_at timestamp with time zone NOT NULL,
    deadline timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    total_cost_ms bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    sub_runs integer DEFAULT 0 NOT NULL
)
PARTITION BY RANGE (day);

COMMENT ON COLUMN asyncflow.runs.sub_runs IS 'on a root run: the sub-pipeline runs started in its tree, at most 1000 (V36)';

CREATE FUNCTION asyncflow.run_json(r asyncflow.runs) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select jsonb_build_object('run_id', r.run_id, 'pipeline', r.pipeline, 'version', r.version, 'status', r.status,
    'input', r.input, 'result', r.result, 'error', r.error, 'notify_url', r.notify_url, 'notify_key', r.notify_key,
    'parent_event', r.parent_event, 'attempt', r.attempt, 'retry_of', r.retry_of, 'retried_by', r.retried_by,
    'run_at', r.run_at, 'deadline', r.deadline, 'started_at', r.started_at, 'finished_at', r.finished_at,
    'total_cost_ms', r.total_cost_ms, 'created_at', r.created_at, 'updated_at', r.updated_at)
$$;

CREATE FUNCTION asyncflow.set_pipeline_status(name text, version integer, status text) RETURNS asyncflow.pipelines
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  p_name alias for $1;
  p_version alias for $2;
  p_status alias for $3;
  v_row asyncflow.pipelines;
begin
  if p_status is null or p_status not in ('active', 'draft', 'retired') then
    perform asyncflow.raise_error('AF006', format('status must be active, draft or retired, got %s',
      coalesce(quote_literal(p_status), 'null')));
  end if;
  perform pg_advisory_xact_lock(16714, hashtext(p_name));
  if p_status = 'active' then
    update asyncflow.pipelines p set status = 'retired', updated_at = now()
    where p.name = p_name and p.status = 'active' and p.version <> p_version;
  end if;
  update asyncflow.pipelines p set status = p_status, updated_at = now()
  where p.name = p_name and p.version = p_version returning * into v_row;
  if not found then
    -- (V37) through raise_error, which cuts a long name
    perform asyncflow.raise_error('AF011', format('unknown pipeline %L version %s', p_name, p_version));
  end if;
  return v_row;
end
$_$;

CREATE FUNCTION asyncflow.set_queue_indexes(p_task_type text, p_on boolean) RETURNS void
    LANGUAGE plpgsql
    AS $_$
declare
  v_have integer;
begin
  perform asyncflow.check_type_name(p_task_type);
  select count(*) into v_have from pg_catalog.pg_class c
  where c.relnamespace = 'asyncflow'::regnamespace
    and c.relname in ('tasks_' || p_task_type || '$key_ready', 'tasks_' || p_task_type || '$key_running');
  if v_have = (case when p_on then 2 else 0 end) then
    return;
  end if;
  perform set_config('lock_timeout', '5s', true);
  if p_on then
    execute format('create index if not exists %I on asyncflow.%I (coalesce(queue_key, %L), order_time) '
      'where status = ''pending''', 'tasks_' || p_task_type || '$key_ready', 'tasks_' || p_task_type, '');
    execute format('create index if not exists %I on asyncflow.%I (coalesce(queue_key, %L)) '
      'where status = ''running''', 'tasks_' || p_task_type || '$key_running', 'tasks_' || p_task_type, '');
  else
    execute format('drop index if exists asyncflow.%I', 'tasks_' || p_task_type || '$key_ready');
    execute format('drop index if exists asyncflow.%I', 'tasks_' || p_task_type || '$key_running');
    delete from asyncflow.queue_cursors where task_type = p_task_type;
  end if;
end
$_$;

CREATE FUNCTION asyncflow.set_queue_limit(p_task_type text, p_queue_key text, p_concurrency integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_type asyncflow.task_types;
begin
  select * into v_type from asyncflow.task_types y where y.task_type = p_task_type collate "default";
  if not found then
    perform asyncflow.check_type_name(p_task_type);
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  if p_queue_key is null or length(p_queue_key) > 255 then
    perform asyncflow.raise_error('AF006',
      format('queue_key must be a string of at most 255 characters ('''' for the tasks without a key), got %s',
        coalesce(to_jsonb(p_queue_key)::text, 'null')));
  end if;
  if p_concurrency not between 0 and 1000000 then
    perform asyncflow.raise_error('AF006',
      format('concurrency must be an integer between 0 and 1000000 (0 holds the key), got %s', p_concurrency));
  end if;
  if not v_type.fair_queues then
    perform asyncflow.raise_error('AF006', format('task type %L does not have fair_queues: no claim would read '
      'a limit per queue key', v_type.task_type));
  end if;
  if p_concurrency is null then
    delete from asyncflow.queue_limits l
    where l.task_type = v_type.task_type and l.queue_key = p_queue_key collate "default";
    -- a hold let go, or a lower limit of its own gone: the key's waiting tasks may run now
    if found then
      perform asyncflow.wake(v_type.task_type);
    end if;
    return v_type.queue_concurrency;
  end if;
  insert into asyncflow.queue_limits as l (task_type, queue_key, concurrency, updated_at)
  values (v_type.task_type, p_queue_key collate "default", p_concurrency, now())
  on conflict (task_type, queue_key) do update set concurrency = excluded.concurrency, updated_at = excluded.updated_at;
  -- a key given more room may have work waiting now (a key held, 0, has none to wake for)
  if p_concurrency > 0 then
    perform asyncflow.wake(v_type.task_type);
  end if;
  return p_concurrency;
end
$$;

CREATE FUNCTION asyncflow.shard_is_live(p_task_type text, p_shard integer) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  select exists (select 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and status = 'pending')
      or exists (select 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and status = 'running')
$$;

CREATE FUNCTION asyncflow.shorten(p_text text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select case when length(p_text) <= 400 then p_text
    else left(p_text, 200) || format('…[%s characters cut]…', length(p_text) - 350) || right(p_text, 150) end
$$;

CREATE FUNCTION asyncflow.stage_time_bounds() RETURNS double precision[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select '{0.005,0.01,0.05,0.1,0.5,1,5,30,60,300,1800,3600,21600}'::double precision[]
$$;

CREATE FUNCTION asyncflow.start_run(pipeline text, input jsonb DEFAULT '{}'::jsonb, notify_url text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, notify_key text DEFAULT NULL::text, version integer DEFAULT NULL::integer, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
  select asyncflow.wf_new_run($1, $6, $2, $3, $5, $4, null, 0, 1, null, coalesce($7, now()))
$_$;

CREATE TABLE asyncflow.tasks (
    task_type text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    stage text NOT NULL,
    status asyncflow.task_status DEFAULT 'pending'::asyncflow.task_status NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    retry_count integer DEFAULT 0 NOT NULL,
    max_retry_num integer NOT NULL,
    max_retry_interval integer NOT NULL,
    claim_seq integer DEFAULT 0 NOT NULL,
    owner text,
    claimed_at timestamp with time zone,
    lease_until timestamp with time zone,
    order_time timestamp with time zone NOT NULL,
    queue_key text,
    user_id text,
    idempotency_key text,
    context jsonb DEFAULT '{}'::jsonb NOT NULL,
    result jsonb,
    last_error text,
    schedule_log jsonb DEFAULT '[]'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    run_ref text
)
PARTITION BY LIST (task_type);

CREATE FUNCTION asyncflow.task_json(t asyncflow.tasks) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select jsonb_build_object(
    'id', asyncflow.format_task_id(t.task_type, t.shard, t.id), 'type', t.task_type, 'stage', t.stage,
    'status', t.status, 'priority', t.priority, 'attempt', t.attempt, 'retry_count', t.retry_count,
    'max_retry_num', t.max_retry_num, 'max_retry_interval', t.max_retry_interval, 'claim_seq', t.claim_seq,
    'owner', case when t.status <> 'succeeded' then t.owner end, 'lease_until', t.lease_until,
    'order_time', t.order_time, 'user_id', t.user_id, 'queue_key', t.queue_key,
    'idempotency_key', t.idempotency_key, 'context', t.context, 'result', t.result, 'error', t.last_error,
    'schedule_log', asyncflow.task_log(t), 'created_at', t.created_at, 'updated_at', t.updated_at,
    'finished_at', t.finished_at)
$$;

CREATE FUNCTION asyncflow.task_log(t asyncflow.tasks) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
  select case when t.status = 'succeeded' and t.owner is not null
    then asyncflow.append_log(t.schedule_log, jsonb_build_object('worker', t.owner, 'stage', t.stage,
      'attempt', t.attempt, 'start', t.claimed_at,
      'cost_ms', floor(date_part('epoch', t.finished_at - t.claimed_at) * 1000)::bigint, 'outcome', 'succeed'))
    else t.schedule_log end
$$;

CREATE TABLE asyncflow.task_types (
    task_type text NOT NULL,
    schedule_limit integer DEFAULT 100 NOT NULL,
    schedule_interval double precision DEFAULT 5 NOT NULL,
    max_processing_time integer DEFAULT 300 NOT NULL,
    max_retry_num integer DEFAULT 3 NOT NULL,
    max_retry_interval integer DEFAULT 60 NOT NULL,
    shard_max_rows bigint DEFAULT 5000000 NOT NULL,
    retention integer DEFAULT 604800 NOT NULL,
    concurrency integer,
    paused boolean DEFAULT false NOT NULL,
    initial_stage text DEFAULT 'start'::text NOT NULL,
    id_seq regclass NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    fair_queues boolean DEFAULT false NOT NULL,
    queue_concurrency integer,
    CONSTRAINT task_types_concurrency_check CHECK (((concurrency >= 1) AND (concurrency <= 1000000))),
    CONSTRAINT task_types_initial_stage_check CHECK ((initial_stage ~ '^[A-Za-z0-9_.:/-]{1,64}$'::text)),
    CONSTRAINT task_types_max_processing_time_check CHECK (((max_processing_time >= 1) AND (max_processing_time <= 31536000))),
    CONSTRAINT task_types_max_retry_interval_check CHECK (((max_retry_interval >= '-31536000'::integer) AND (max_retry_interval <= 31536000))),
    CONSTRAINT task_types_max_retry_num_check CHECK (((max_retry_num >= 0) AND (max_retry_num <= 1000))),
    CONSTRAINT task_types_name_check CHECK ((task_type ~ '^[a-z][a-z0-9_]{0,39}$'::text)),
    CONSTRAINT task_types_queue_concurrency_check CHECK (((queue_concurrency >= 1) AND (queue_concurrency <= 1000000))),
    CONSTRAINT task_types_retention_check CHECK (((retention >= 0) AND (retention <= 315360000))),
    CONSTRAINT task_types_schedule_interval_check CHECK (((schedule_interval >= (0.01)::double precision) AND (schedule_interval <= (86400)::double precision))),
    CONSTRAINT task_types_schedule_limit_check CHECK (((schedule_limit >= 1) AND (schedule_limit <= 10000))),
    CONSTRAINT task_types_shard_max_rows_check CHECK (((shard_max_rows >= 10) AND (shard_max_rows <= '1000000000000'::bigint)))
);

CREATE FUNCTION asyncflow.task_type_json(p asyncflow.task_types) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select jsonb_build_object(
    'task_type', p.task_type, 'schedule_limit', p.schedule_limit, 'schedule_interval', p.schedule_interval,
    'max_processing_time', p.max_processing_time, 'max_retry_num', p.max_retry_num,
    'max_retry_interval', p.max_retry_interval, 'shard_max_rows', p.shard_max_rows, 'retention', p.retention,
    'concurrency', p.concurrency, 'paused', p.paused, 'initial_stage', p.initial_stage,
    'fair_queues', p.fair_queues, 'queue_concurrency', p.queue_concurrency,
    'created_at', p.created_at, 'updated_at', p.updated_at)
$$;

CREATE FUNCTION asyncflow.tg_enqueue_info() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if tg_table_name = 'config' then
    delete from asyncflow.enqueue_info;
    perform asyncflow.refresh_enqueue_info(y.task_type) from asyncflow.task_types y;
  elsif tg_level = 'STATEMENT' then
    delete from asyncflow.enqueue_info e
    where not exists (select 1 from asyncflow.positions p where p.task_type = e.task_type);
  else
    perform asyncflow.refresh_enqueue_info(new.task_type);
  end if;
  return null;
end
$$;

CREATE FUNCTION asyncflow.tg_task_types__functions() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  perform asyncflow.create_claim_function(new.task_type);
  perform asyncflow.create_report_function(new.task_type);
  perform asyncflow.create_hold_functions(new.task_type);
  return null;
end
$$;

CREATE FUNCTION asyncflow.tg_task_types__resumed() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform asyncflow.wake(new.task_type);
  return null;
end
$$;

CREATE FUNCTION asyncflow.tg_tasks__workflow() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

CREATE FUNCTION asyncflow.wake(p_task_type text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  if pg_try_advisory_xact_lock(16712, hashtext(p_task_type)) then
    perform pg_notify('asyncflow', p_task_type);
  end if;
end
$$;

CREATE FUNCTION asyncflow.wf_activate(p_run asyncflow.runs, p_node text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_plan jsonb := asyncflow.wf_plan(p_run);
  v_def jsonb := v_plan -> 'nodes' -> p_node;
  v_type text := v_def ->> 'type';
  v_event_id text := p_run.run_id || '_' || p_node;
  v_inputs jsonb;
  v_data jsonb;
  v_items jsonb;
  v_edge jsonb;
  v_route text;
  v_ids text[];
  v_child text;
  v_url text;
  v_root asyncflow.runs;
  v_up asyncflow.runs;
  v_steps integer;
  v_child_pipe asyncflow.pipelines;
begin
  update asyncflow.run_events set status = 'running', exec_cnt = exec_cnt + 1, started_at = coalesce(started_at, p_now),
    deadline = p_now + make_interval(secs => (v_def ->> 'timeout')::double precision), task_id = null,
    child_run = null, cancelled_from = null, error = null, result = null, finished_at = null, total_cost_ms = null,
    updated_at = p_now
  where day = p_run.day and event_id = v_event_id;
  v_inputs := asyncflow.wf_inputs(p_run, v_def);
  begin
    case v_type
    when 'start' then
      perform asyncflow.wf_complete_event(v_event_id, p_run.input, p_now);
    when 'end', 'parallel' then
      perform asyncflow.wf_complete_event(v_event_id, v_inputs, p_now);
    when 'router' then
      v_data := asyncflow.wf_data(p_run);
      for v_edge in select e from jsonb_array_elements(v_def -> 'out') e loop
        if v_edge ->> 'when' is null or coalesce(jsonb_path_match(v_data, (v_edge ->> 'when')::jsonpath, silent => true), false) then
          v_route := v_edge ->> 'to';
          exit;
        end if;
      end loop;
      if v_route is null then
        perform asyncflow.wf_fail_event(v_event_id, 'no route matched and the router has no default edge', p_now);
      else
        perform asyncflow.wf_complete_event(v_event_id, jsonb_build_object('route', v_route), p_now);
      end if;
    when 'task' then
      if v_def ->> 'function' is null then
        update asyncflow.run_events set status = 'external', updated_at = p_now where day = p_run.day and event_id = v_event_id;
      else
        v_ids := asyncflow.wf_create_tasks(v_def, jsonb_build_array(asyncflow.wf_node_context(p_run, p_node, v_inputs)),
          array[v_event_id]);
        update asyncflow.run_events set status = 'pending', task_id = v_ids[1], updated_at = p_now
        where day = p_run.day and event_id = v_event_id;
      end if;
    when 'dynamic' then
      v_items := jsonb_path_query_first(asyncflow.wf_data(p_run), (v_def ->> 'items')::jsonpath, silent => true);
      if jsonb_typeof(v_items) is distinct from 'array' then
        perform asyncflow.wf_fail_event(v_event_id, format('items %s gave %s, not an array', v_def ->> 'items',
          coalesce(left(v_items::text, 200), 'nothing')), p_now);
      elsif jsonb_array_length(v_items) > coalesce((v_def ->> 'max_segments')::integer, 10000) then
        perform asyncflow.wf_fail_event(v_event_id, format('items gave %s segments, more than max_segments %s',
          jsonb_array_length(v_items), coalesce((v_def ->> 'max_segments')::integer, 10000)), p_now);
      elsif jsonb_array_length(v_items) = 0 then
        perform asyncflow.wf_complete_event(v_event_id, '[]'::jsonb, p_now);
      else
        perform asyncflow.wf_start_segments(p_run, p_node, v_def, v_inputs,
          array(select generate_series(0, jsonb_array_length(v_items) - 1)),
          array(select e from jsonb_array_elements(v_items) e), jsonb_array_length(v_items), p_now);
      end if;
    when 'pipeline' then
      -- (V36) the runs above, up to the root: the steps each adds around the sub-pipeline node
      -- that started the one below (plan_steps), and the root, which counts its tree's runs
      v_steps := coalesce((v_def ->> 'steps_around')::integer, 0);
      v_root := p_run;
      while v_root.parent_event is not null loop
        v_up := asyncflow.wf_get_run(split_part(v_root.parent_event, '_', 1));
        exit when v_up.run_id is null;
        v_steps := v_steps + coalesce((asyncflow.wf_plan(v_up) -> 'nodes'
          -> substr(v_root.parent_event, strpos(v_root.parent_event, '_') + 1) ->> 'steps_around')::integer, 0);
        v_root := v_up;
      end loop;
      -- the version wf_new_run starts (when there is none, it says so)
      select * into v_child_pipe from asyncflow.pipelines p where p.name = v_def ->> 'pipeline'
        and (case when v_def ->> 'version' is null then p.status = 'active' else p.version = (v_def ->> 'version')::integer end);
      v_steps := v_steps + coalesce((v_child_pipe.plan ->> 'steps')::integer, 0);
      if p_run.depth >= 8 then
        perform asyncflow.wf_fail_event(v_event_id, 'sub-pipelines nest deeper than 8 levels', p_now);
      elsif v_steps > asyncflow.plan_step_limit() then
        perform asyncflow.wf_fail_event(v_event_id, format('sub-pipeline %L version %s: with the runs above, one call '
          'could run %s steps, more than the limit of %s (its steps have grown since this pipeline was stored)',
          v_child_pipe.name, v_child_pipe.version, v_steps, asyncflow.plan_step_limit()), p_now);
      else
        -- (V36) counted on the root; rolled back with the child when wf_new_run raises
        update asyncflow.runs set sub_runs = sub_runs + 1
        where day = v_root.day and run_id = v_root.run_id and sub_runs < 1000;
        if not found then
          perform asyncflow.wf_fail_event(v_event_id, format('run %s has started 1000 sub-pipeline runs in its tree, '
            'the limit for one run', v_root.run_id), p_now);
        else
          v_child := asyncflow.wf_new_run(v_def ->> 'pipeline', (v_def ->> 'version')::integer,
            jsonb_build_object('parent_run', p_run.run_id, 'input', p_run.input, 'inputs', v_inputs),
            null, p_run.notify_key, null, v_event_id, p_run.depth + 1, 1, null, p_now);
          -- the child may have ended already (a pipeline of instant nodes) and completed this event
          update asyncflow.run_events set child_run = v_child, updated_at = p_now where day = p_run.day and event_id = v_event_id;
        end if;
      end if;
    when 'callback' then
      v_url := coalesce(v_def ->> 'url', p_run.notify_url);
      if v_url is null then
        perform asyncflow.wf_fail_event(v_event_id, 'no url: the node names none and the run has no notify_url', p_now);
      else
        perform asyncflow.wf_enqueue_callback(p_run, 'node', v_event_id, v_url, jsonb_build_object(
          'run_id', p_run.run_id, 'pipeline', p_run.pipeline, 'version', p_run.version, 'node', p_node,
          'notify_key', p_run.notify_key, 'input', p_run.input, 'inputs', v_inputs), p_now);
      end if;
    end case;
  exception
    when deadlock_detected or serialization_failure or lock_not_available or query_canceled then
      raise;
    when sqlstate 'AF001' or sqlstate 'AF005' or sqlstate 'AF006' or sqlstate 'AF011' or sqlstate 'AF013' then
      perform asyncflow.wf_fail_event(v_event_id, sqlerrm, p_now);
  end;
end
$$;

CREATE FUNCTION asyncflow.wf_arrive(p_run asyncflow.runs, p_node text, p_live boolean, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_event asyncflow.run_events;
  v_plan jsonb;
  v_edge jsonb;
begin
  update asyncflow.run_events set latch_cnt = latch_cnt + 1, live_cnt = live_cnt + p_live::integer, updated_at = p_now
  where day = p_run.day and event_id = p_run.run_id || '_' || p_node and status = 'waiting'
  returning * into v_event;
  if not found or v_event.latch_cnt < v_event.in_degree then
    return;
  end if;
  if v_event.live_cnt > 0 then
    perform asyncflow.wf_activate(p_run, p_node, p_now);
    return;
  end if;
  -- every in-edge skipped: so is this node, and its out-edges carry the skip on
  update asyncflow.run_events set status = 'skipped', finished_at = p_now, updated_at = p_now
  where day = p_run.day and event_id = v_event.event_id;
  v_plan := asyncflow.wf_plan(p_run);
  if p_node = v_plan ->> 'end' then
    perform asyncflow.wf_finish_run(p_run.run_id, 'failed', null, 'no branch reached the end node', p_now);
    return;
  end if;
  for v_edge in select e from jsonb_array_elements(v_plan -> 'nodes' -> p_node -> 'out') e order by e ->> 'to' loop
    perform asyncflow.wf_arrive(p_run, v_edge ->> 'to', false, p_now);
  end loop;
end
$$;

CREATE FUNCTION asyncflow.wf_begin_run(p_run_id text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_run asyncflow.runs;
  v_plan jsonb;
begin
  update asyncflow.runs r set status = 'running', started_at = p_now, updated_at = p_now,
    deadline = p_now + make_interval(secs => (select (p.plan ->> 'timeout')::double precision from asyncflow.pipelines p
      where p.name = r.pipeline and p.version = r.version))
  where day = asyncflow.run_day(p_run_id) and run_id = p_run_id and status = 'scheduled'
  returning * into v_run;
  if found then
    v_plan := asyncflow.wf_plan(v_run);
    perform asyncflow.wf_activate(v_run, v_plan ->> 'start', p_now);
  end if;
end
$$;

CREATE FUNCTION asyncflow.wf_cancel_task(p_task_id text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  if p_task_id is not null then
    perform asyncflow.cancel_task(p_task_id, p_now);
  end if;
exception when sqlstate 'AF007' then
  null; -- its shard was dropped: nothing left to cancel
end
$$;

CREATE FUNCTION asyncflow.wf_close_event_work(p_day date, p_event_id text, p_task_id text, p_child_run text, p_node_type text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_task_id text;
begin
  perform asyncflow.wf_cancel_task(p_task_id, p_now);
  if p_child_run is not null then
    perform asyncflow.wf_finish_run(p_child_run, 'cancelled', null, 'the parent run ended', p_now, false);
  end if;
  if p_node_type = 'dynamic' then
    -- segments closed first, so that their tasks' cancellation finds nothing open
    for v_task_id in
      with closed as (
        update asyncflow.run_segments set status = 'cancelled', finished_at = p_now, updated_at = p_now
        where day = p_day and event_id = p_event_id and status in ('pending', 'running')
        returning task_id
      ) select task_id from closed order by task_id
    loop
      perform asyncflow.wf_cancel_task(v_task_id, p_now);
    end loop;
  end if;
  update asyncflow.callbacks set status = 'cancelled', updated_at = p_now
  where day = p_day and event_id = p_event_id and status = 'pending';
end
$$;

CREATE FUNCTION asyncflow.wf_complete_event(p_event_id text, p_result jsonb, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_event asyncflow.run_events := asyncflow.wf_end_event(p_event_id, 'succeeded', p_result, null, p_now);
  v_run asyncflow.runs;
  v_plan jsonb;
  v_edge jsonb;
begin
  if v_event.event_id is null then
    return;
  end if;
  v_run := asyncflow.wf_get_run(v_event.run_id);
  if v_run.status is distinct from 'running' then
    return;
  end if;
  v_plan := asyncflow.wf_plan(v_run);
  if v_event.node = v_plan ->> 'end' then
    perform asyncflow.wf_finish_run(v_run.run_id, 'succeeded', p_result, null, p_now);
    return;
  end if;
  -- targets in name order: concurrent completions lock shared joins in the same order
  for v_edge in
    select e from jsonb_array_elements(v_plan -> 'nodes' -> v_event.node -> 'out') e order by e ->> 'to'
  loop
    perform asyncflow.wf_arrive(v_run, v_edge ->> 'to',
      v_event.node_type <> 'router' or v_edge ->> 'to' = p_result ->> 'route', p_now);
  end loop;
end
$$;

CREATE FUNCTION asyncflow.wf_create_tasks(p_node jsonb, p_contexts jsonb, p_refs text[]) RETURNS text[]
    LANGUAGE plpgsql
    AS $$
declare
  v_ids text[];
begin
  select array_agg(id order by k) into v_ids
  from asyncflow.create_tasks(p_node ->> 'function', (
    select jsonb_agg(jsonb_strip_nulls(jsonb_build_object('context', c, 'stage', p_node -> 'stage',
      'priority', p_node -> 'priority')) order by k)
    from jsonb_array_elements(p_contexts) with ordinality x(c, k))) with ordinality y(id, k);
  update asyncflow.tasks t set run_ref = l.ref
  from (select (asyncflow.parse_task_id(i)).*, r as ref from unnest(v_ids, p_refs) u(i, r)) l
  where t.task_type = l.task_type and t.shard = l.shard and t.id = l.id;
  return v_ids;
end
$$;

CREATE FUNCTION asyncflow.wf_data(p_run asyncflow.runs) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select jsonb_build_object('input', p_run.input, 'nodes', coalesce((
    select jsonb_object_agg(e.node, coalesce(e.result, 'null'::jsonb)) from asyncflow.run_events e
    where e.day = p_run.day and e.run_id = p_run.run_id and e.status = 'succeeded'), '{}'::jsonb))
$$;

CREATE TABLE asyncflow.run_events (
    day date NOT NULL,
    event_id text NOT NULL,
    run_id text NOT NULL,
    node text NOT NULL,
    node_type text NOT NULL,
    status text DEFAULT 'waiting'::text NOT NULL,
    cancelled_from text,
    in_degree integer NOT NULL,
    latch_cnt integer DEFAULT 0 NOT NULL,
    live_cnt integer DEFAULT 0 NOT NULL,
    exec_cnt integer DEFAULT 0 NOT NULL,
    segment_cnt integer DEFAULT 0 NOT NULL,
    segments_done integer DEFAULT 0 NOT NULL,
    task_id text,
    child_run text,
    result jsonb,
    error text,
    deadline timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    total_cost_ms bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT run_events_status_check CHECK ((status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text, 'external'::text, 'succeeded'::text, 'failed'::text, 'skipped'::text, 'cancelled'::text])))
)
PARTITION BY RANGE (day);

CREATE FUNCTION asyncflow.wf_end_event(p_event_id text, p_status text, p_result jsonb, p_error text, p_now timestamp with time zone) RETURNS asyncflow.run_events
    LANGUAGE plpgsql
    AS $$
declare
  v_event asyncflow.run_events;
begin
  -- a failed event keeps what it had (an async node's function result, say)
  update asyncflow.run_events set status = p_status,
    result = case when p_status = 'failed' then result else p_result end, error = left(p_error, 2000),
    finished_at = p_now,
    total_cost_ms = floor(date_part('epoch', p_now - coalesce(started_at, p_now)) * 1000)::bigint, updated_at = p_now
  where day = asyncflow.run_day(p_event_id) and event_id = p_event_id and status in ('pending', 'running', 'external')
  returning * into v_event;
  return v_event;
end
$$;

CREATE FUNCTION asyncflow.wf_enqueue_callback(p_run asyncflow.runs, p_kind text, p_event_id text, p_url text, p_payload jsonb, p_now timestamp with time zone) RETURNS text
    LANGUAGE plpgsql
    AS $$
declare
  v_id text := p_run.run_id || '_cb' || nextval('asyncflow.callback_seq');
begin
  insert into asyncflow.callbacks (day, callback_id, run_id, kind, event_id, url, payload, next_attempt_at,
    give_up_at, created_at, updated_at)
  select p_run.day, v_id, p_run.run_id, p_kind, p_event_id, p_url, p_payload, p_now,
    p_now + make_interval(secs => c.callback_give_up), p_now, p_now
  from asyncflow.config c;
  return v_id;
end
$$;

CREATE FUNCTION asyncflow.wf_fail_event(p_event_id text, p_error text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_event asyncflow.run_events := asyncflow.wf_end_event(p_event_id, 'failed', null, p_error, p_now);
begin
  if v_event.event_id is null then
    return;
  end if;
  perform asyncflow.wf_close_event_work(v_event.day, v_event.event_id, v_event.task_id, v_event.child_run,
    v_event.node_type, p_now);
  perform asyncflow.wf_finish_run(v_event.run_id, 'failed', null,
    format('node %s failed: %s', v_event.node, left(p_error, 2000)), p_now);
end
$$;

CREATE FUNCTION asyncflow.wf_finish_run(p_run_id text, p_status asyncflow.run_status, p_result jsonb, p_error text, p_now timestamp with time zone, p_notify boolean DEFAULT true) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_run asyncflow.runs;
  v_open record;
begin
  update asyncflow.runs set status = p_status, result = p_result, error = p_error, finished_at = p_now,
    total_cost_ms = floor(date_part('epoch', p_now - coalesce(started_at, p_now)) * 1000)::bigint, updated_at = p_now
  where day = asyncflow.run_day(p_run_id) and run_id = p_run_id and status in ('scheduled', 'running')
  returning * into v_run;
  if not found then
    return;
  end if;
  insert into asyncflow.pipeline_counters as k (pipeline, status, slot, runs)
  values (v_run.pipeline, p_status, pg_backend_pid() % 16, 1)
  on conflict (pipeline, status, slot) do update set runs = k.runs + 1;
  -- open events first (so that the tasks' own ends find them closed), then their work
  for v_open in
    with closed as (
      update asyncflow.run_events set cancelled_from = status, status = 'cancelled', finished_at = p_now, updated_at = p_now
      where day = v_run.day and run_id = v_run.run_id and status in ('waiting', 'pending', 'running', 'external')
      returning event_id, task_id, child_run, node_type, cancelled_from
    )
    select event_id, task_id, child_run, node_type, cancelled_from from closed order by event_id
  loop
    perform asyncflow.wf_close_event_work(v_run.day, v_open.event_id, v_open.task_id, v_open.child_run,
      v_open.node_type, p_now);
  end loop;

  if v_run.parent_event is not null then
    if p_status = 'succeeded' then
      perform asyncflow.wf_complete_event(v_run.parent_event, p_result, p_now);
    else
      perform asyncflow.wf_fail_event(v_run.parent_event,
        format('sub-pipeline run %s %s%s', v_run.run_id, p_status, coalesce(': ' || p_error, '')), p_now);
    end if;
  end if;
  if p_notify and v_run.notify_url is not null then
    perform asyncflow.wf_enqueue_callback(v_run, 'run', null, v_run.notify_url, jsonb_build_object(
      'run_id', v_run.run_id, 'pipeline', v_run.pipeline, 'version', v_run.version, 'status', v_run.status,
      'result', v_run.result, 'error', v_run.error, 'notify_key', v_run.notify_key, 'attempt', v_run.attempt,
      'retry_of', v_run.retry_of, 'started_at', v_run.started_at, 'finished_at', v_run.finished_at,
      'total_cost_ms', v_run.total_cost_ms), p_now);
  end if;
end
$$;

CREATE FUNCTION asyncflow.wf_get_run(p_run_id text) RETURNS asyncflow.runs
    LANGUAGE sql STABLE
    AS $$
  select * from asyncflow.runs where day = asyncflow.run_day(p_run_id) and run_id = p_run_id
$$;

CREATE FUNCTION asyncflow.wf_inputs(p_run asyncflow.runs, p_node jsonb) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select coalesce(jsonb_object_agg(e.node, coalesce(e.result, 'null'::jsonb)), '{}'::jsonb)
  from asyncflow.run_events e
  where e.day = p_run.day and e.event_id in (select p_run.run_id || '_' || x from jsonb_array_elements_text(p_node -> 'in') x)
    and e.status = 'succeeded'
$$;

CREATE FUNCTION asyncflow.wf_new_run(p_pipeline text, p_version integer, p_input jsonb, p_notify_url text, p_notify_key text, p_run_at timestamp with time zone, p_parent_event text, p_depth integer, p_attempt integer, p_retry_of text, p_now timestamp with time zone) RETURNS text
    LANGUAGE plpgsql
    AS $_$
declare
  v_pipe asyncflow.pipelines;
  v_day date := (p_now at time zone 'UTC')::date;
  v_run_id text := 'r' || to_char(p_now at time zone 'UTC', 'YYYYMMDD') || '-' || replace(gen_random_uuid()::text, '-', '');
  v_max_bytes integer;
begin
  if p_pipeline is null or p_pipeline !~ '^[a-z][a-z0-9_]{0,39}$' then
    perform asyncflow.raise_error('AF006', format('invalid pipeline name %s', coalesce(quote_literal(p_pipeline), 'null')));
  end if;
  select * into v_pipe from asyncflow.pipelines p where p.name = p_pipeline
    and (case when p_version is null then p.status = 'active' else p.version = p_version end);
  if not found then
    perform asyncflow.wf_run_error('AF011', case when p_version is null
      then format('pipeline %L has no active version', p_pipeline)
      else format('unknown pipeline %L version %s', p_pipeline, p_version) end);
  end if;
  if v_pipe.status = 'retired' then
    perform asyncflow.wf_run_error('AF013', format('pipeline %L version %s is retired: it starts no new runs',
      p_pipeline, v_pipe.version));
  end if;
  select max_context_bytes into v_max_bytes from asyncflow.config;
  if p_input is not null and jsonb_typeof(p_input) <> 'object' then
    perform asyncflow.raise_error('AF006', 'input must be a JSON object');
  elsif pg_column_size(p_input) > v_max_bytes then
    perform asyncflow.raise_error('AF005', format('input is too large: %s bytes, the limit is %s',
      pg_column_size(p_input), v_max_bytes));
  elsif p_notify_url is not null and (p_notify_url !~ '^https?://[^\s]+$' or length(p_notify_url) > 2048) then
    perform asyncflow.raise_error('AF006', format('notify_url must be an http(s) URL of at most 2048 characters, got %s',
      to_jsonb(left(p_notify_url, 100))));
  elsif length(p_notify_key) not between 1 and 255 then
    perform asyncflow.raise_error('AF006', 'notify_key must be a string of 1 to 255 characters');
  elsif p_run_at is not null and (not isfinite(p_run_at) or p_run_at > p_now + interval '366 days') then
    perform asyncflow.raise_error('AF006', format('run_at must be a finite time within a year, got %s', p_run_at));
  end if;
  perform asyncflow.ensure_run_day(v_day);
  insert into asyncflow.runs (day, run_id, pipeline, version, status, input, notify_url, notify_key, parent_event,
    depth, attempt, retry_of, run_at, created_at, updated_at)
  values (v_day, v_run_id, p_pipeline, v_pipe.version, 'scheduled', coalesce(p_input, '{}'::jsonb), p_notify_url,
    p_notify_key, p_parent_event, p_depth, p_attempt, p_retry_of, coalesce(p_run_at, p_now), p_now, p_now);
  insert into asyncflow.run_events (day, event_id, run_id, node, node_type, in_degree, created_at, updated_at)
  select v_day, v_run_id || '_' || n, v_run_id, n, v_pipe.plan -> 'nodes' -> n ->> 'type',
    (v_pipe.plan -> 'nodes' -> n ->> 'in_degree')::integer, p_now, p_now
  from jsonb_array_elements_text(v_pipe.plan -> 'order') n;
  if coalesce(p_run_at, p_now) <= p_now then
    perform asyncflow.wf_begin_run(v_run_id, p_now);
  end if;
  return v_run_id;
end
$_$;

CREATE FUNCTION asyncflow.wf_node_context(p_run asyncflow.runs, p_node text, p_inputs jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
  select jsonb_build_object('run_id', p_run.run_id, 'pipeline', p_run.pipeline, 'version', p_run.version,
    'node', p_node, 'event_id', p_run.run_id || '_' || p_node, 'input', p_run.input, 'inputs', p_inputs)
$$;

CREATE FUNCTION asyncflow.wf_plan(p_run asyncflow.runs) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select plan from asyncflow.pipelines where name = p_run.pipeline and version = p_run.version
$$;

CREATE FUNCTION asyncflow.wf_rerun_event(p_run asyncflow.runs, p_event asyncflow.run_events, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_def jsonb := asyncflow.wf_plan(p_run) -> 'nodes' -> p_event.node;
  v_ns integer[];
  v_items jsonb[];
begin
  if p_event.node_type = 'dynamic' and p_event.segment_cnt > 0 then
    select array_agg(s.n order by s.n), array_agg(s.item order by s.n) into v_ns, v_items
    from asyncflow.run_segments s
    where s.day = p_event.day and s.event_id = p_event.event_id and s.status <> 'succeeded';
    update asyncflow.run_events set status = 'running', exec_cnt = exec_cnt + 1, error = null, cancelled_from = null,
      finished_at = null, updated_at = p_now
    where day = p_event.day and event_id = p_event.event_id;
    if v_ns is null then
      perform asyncflow.wf_complete_event(p_event.event_id, (select jsonb_agg(coalesce(s.result, 'null'::jsonb) order by s.n)
        from asyncflow.run_segments s where s.day = p_event.day and s.event_id = p_event.event_id), p_now);
    else
      perform asyncflow.wf_start_segments(p_run, p_event.node, v_def, asyncflow.wf_inputs(p_run, v_def), v_ns, v_items,
        p_event.segment_cnt, p_now);
    end if;
  else
    perform asyncflow.wf_activate(p_run, p_event.node, p_now);
  end if;
end
$$;

CREATE FUNCTION asyncflow.wf_run_error(p_code text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  -- (V37) cut: the message may repeat a caller's value of any size
  raise exception using errcode = p_code, message = asyncflow.shorten(p_message);
end
$$;

CREATE FUNCTION asyncflow.wf_run_for_update(p_run_id text) RETURNS asyncflow.runs
    LANGUAGE plpgsql
    AS $$
declare
  v_run asyncflow.runs;
begin
  select * into v_run from asyncflow.runs where day = asyncflow.run_day(p_run_id) and run_id = p_run_id for update;
  if not found then
    perform asyncflow.wf_run_error('AF012', format('unknown run %s', coalesce(quote_literal(p_run_id), 'null')));
  end if;
  return v_run;
end
$$;

CREATE FUNCTION asyncflow.wf_start_segments(p_run asyncflow.runs, p_node text, p_def jsonb, p_inputs jsonb, p_ns integer[], p_items jsonb[], p_count integer, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_event_id text := p_run.run_id || '_' || p_node;
  v_ctx jsonb := asyncflow.wf_node_context(p_run, p_node, p_inputs);
  v_ids text[];
begin
  v_ids := asyncflow.wf_create_tasks(p_def,
    (select jsonb_agg(v_ctx || jsonb_build_object('segment', jsonb_build_object('n', n, 'count', p_count,
       'id', v_event_id || '_' || n, 'item', item)) order by k)
     from unnest(p_ns, p_items) with ordinality u(n, item, k)),
    array(select v_event_id || '#' || n from unnest(p_ns) n));
  insert into asyncflow.run_segments as s (day, segment_id, event_id, run_id, n, status, item, task_id, deadline,
    created_at, updated_at)
  select p_run.day, v_event_id || '_' || n, v_event_id, p_run.run_id, n, 'pending', item, v_ids[k],
    p_now + make_interval(secs => (p_def ->> 'timeout')::double precision), p_now, p_now
  from unnest(p_ns, p_items) with ordinality u(n, item, k)
  on conflict (segment_id, day) do update set status = 'pending', exec_cnt = s.exec_cnt + 1, task_id = excluded.task_id,
    deadline = excluded.deadline, result = null, error = null, finished_at = null, updated_at = p_now;
  update asyncflow.run_events set status = 'pending', segment_cnt = p_count, updated_at = p_now
  where day = p_run.day and event_id = v_event_id;
end
$$;

CREATE FUNCTION asyncflow.wf_task_changed(p_ref text, p_task_id text, p_status asyncflow.task_status, p_result jsonb, p_error text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_event_id text := split_part(p_ref, '#', 1);
  v_day date := asyncflow.run_day(p_ref);
  v_n integer := nullif(split_part(p_ref, '#', 2), '')::integer;
  v_event asyncflow.run_events;
  v_seg asyncflow.run_segments;
begin
  if v_n is null then
    if p_status = 'running' then
      update asyncflow.run_events set status = 'running', updated_at = p_now
      where day = v_day and event_id = v_event_id and status = 'pending' and task_id = p_task_id;
      return;
    end if;
    select * into v_event from asyncflow.run_events where day = v_day and event_id = v_event_id
      and status in ('pending', 'running') and task_id = p_task_id;
    if not found then
      return; -- not this event's current task (restarted, or the run ended)
    end if;
    if p_status = 'succeeded' then
      if v_event.node_type = 'task' and coalesce((asyncflow.wf_plan(asyncflow.wf_get_run(v_event.run_id))
          -> 'nodes' -> v_event.node ->> 'async')::boolean, false) then
        update asyncflow.run_events set status = 'external', result = p_result, updated_at = p_now
        where day = v_day and event_id = v_event_id;
      else
        perform asyncflow.wf_complete_event(v_event_id, p_result, p_now);
      end if;
    elsif p_status = 'failed' then
      perform asyncflow.wf_fail_event(v_event_id, coalesce(p_error, 'the task failed'), p_now);
    elsif p_status = 'cancelled' then
      perform asyncflow.wf_fail_event(v_event_id, format('its task %s was cancelled', p_task_id), p_now);
    end if;
    return;
  end if;

  if p_status = 'running' then
    update asyncflow.run_segments set status = 'running', started_at = coalesce(started_at, p_now), updated_at = p_now
    where day = v_day and segment_id = v_event_id || '_' || v_n and status = 'pending' and task_id = p_task_id;
    update asyncflow.run_events set status = 'running', updated_at = p_now
    where day = v_day and event_id = v_event_id and status = 'pending';
    return;
  end if;
  update asyncflow.run_segments set status = case p_status when 'succeeded' then 'succeeded' when 'failed' then 'failed'
      else 'cancelled' end,
    result = p_result, error = p_error, finished_at = p_now,
    total_cost_ms = floor(date_part('epoch', p_now - coalesce(started_at, p_now)) * 1000)::bigint, updated_at = p_now
  where day = v_day and segment_id = v_event_id || '_' || v_n and status in ('pending', 'running') and task_id = p_task_id
  returning * into v_seg;
  if not found then
    return;
  end if;
  if p_status = 'succeeded' then
    -- the event's row lock orders concurrent segment ends: exactly one sees the last one done
    update asyncflow.run_events set segments_done = segments_done + 1, updated_at = p_now
    where day = v_day and event_id = v_event_id and status in ('pending', 'running')
    returning * into v_event;
    if found and v_event.segments_done >= v_event.segment_cnt then
      perform asyncflow.wf_complete_event(v_event_id, (select jsonb_agg(coalesce(s.result, 'null'::jsonb) order by s.n)
        from asyncflow.run_segments s where s.day = v_day and s.event_id = v_event_id), p_now);
    end if;
  elsif p_status = 'failed' then
    perform asyncflow.wf_fail_event(v_event_id, format('segment %s failed: %s', v_n, coalesce(p_error, 'the task failed')), p_now);
  else
    perform asyncflow.wf_fail_event(v_event_id, format('segment %s: its task %s was cancelled', v_n, p_task_id), p_now);
  end if;
end
$$;

CREATE FUNCTION asyncflow.wf_watch_type(p_task_type text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  perform asyncflow.check_type_name(p_task_type);
  perform pg_advisory_xact_lock(16715, hashtext(p_task_type));
  if not exists (select 1 from pg_trigger g where g.tgname = 'tg_tasks__workflow' and not g.tgisinternal
      and g.tgrelid = format('asyncflow.%I', 'tasks_' || p_task_type)::regclass) then
    execute format('create trigger tg_tasks__workflow after update on asyncflow.%I for each row '
      'when (new.run_ref is not null and old.status is distinct from new.status) '
      'execute function asyncflow.tg_tasks__workflow()', 'tasks_' || p_task_type);
  end if;
end
$$;

CREATE FUNCTION asyncflow.workflow_figures() RETURNS TABLE(pipeline text, kind text, status text, n bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select r.pipeline, 'open', r.status::text, count(*) from asyncflow.runs r
  where r.status in ('scheduled', 'running') group by r.pipeline, r.status
  union all
  select k.pipeline, 'ended', k.status::text, sum(k.runs)::bigint from asyncflow.pipeline_counters k
  group by k.pipeline, k.status
  union all
  select '', 'callbacks', 'pending', count(*) from asyncflow.callbacks c where c.status = 'pending'
$$;

CREATE SEQUENCE asyncflow.callback_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

CREATE TABLE asyncflow.callbacks (
    day date NOT NULL,
    callback_id text NOT NULL,
    run_id text NOT NULL,
    kind text NOT NULL,
    event_id text,
    url text NOT NULL,
    payload jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    owner text,
    give_up_at timestamp with time zone NOT NULL,
    last_error text,
    log jsonb DEFAULT '[]'::jsonb NOT NULL,
    delivered_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT callbacks_kind_check CHECK ((kind = ANY (ARRAY['run'::text, 'node'::text]))),
    CONSTRAINT callbacks_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text, 'cancelled'::text])))
)
PARTITION BY RANGE (day);

CREATE TABLE asyncflow.config (
    singleton boolean DEFAULT true NOT NULL,
    max_context_bytes integer DEFAULT 1048576 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    run_retention integer DEFAULT 604800 NOT NULL,
    callback_give_up integer DEFAULT 86400 NOT NULL,
    callback_max_interval integer DEFAULT 300 NOT NULL,
    CONSTRAINT config_callback_give_up_check CHECK (((callback_give_up >= 1) AND (callback_give_up <= 31536000))),
    CONSTRAINT config_callback_max_interval_check CHECK (((callback_max_interval >= 1) AND (callback_max_interval <= 86400))),
    CONSTRAINT config_max_context_bytes_check CHECK (((max_context_bytes >= 1024) AND (max_context_bytes <= 268435456))),
    CONSTRAINT config_run_retention_check CHECK (((run_retention >= 60) AND (run_retention <= 315360000))),
    CONSTRAINT config_singleton_check CHECK (singleton)
);

CREATE TABLE asyncflow.enqueue_info (
    task_type text NOT NULL,
    end_pos integer NOT NULL,
    id_seq regclass NOT NULL,
    initial_stage text NOT NULL,
    max_retry_num integer NOT NULL,
    max_retry_interval integer NOT NULL,
    max_context_bytes integer NOT NULL
);

CREATE TABLE asyncflow.idempotency_keys (
    task_type text NOT NULL,
    idempotency_key text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE asyncflow.pipeline_counters (
    pipeline text NOT NULL,
    status asyncflow.run_status NOT NULL,
    slot smallint NOT NULL,
    runs bigint DEFAULT 0 NOT NULL
);

CREATE TABLE asyncflow.positions (
    task_type text NOT NULL,
    begin_pos integer DEFAULT 1 NOT NULL,
    end_pos integer DEFAULT 1 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT positions_begin_pos_check CHECK ((begin_pos >= 1)),
    CONSTRAINT positions_check CHECK ((begin_pos <= end_pos))
);

CREATE TABLE asyncflow.queue_cursors (
    task_type text NOT NULL,
    after_key text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE VIEW asyncflow.queue_depth AS
 SELECT y.task_type,
    COALESCE(p.ready, (0)::bigint) AS ready,
    COALESCE(p.delayed, (0)::bigint) AS delayed,
    COALESCE(r.running, (0)::bigint) AS running,
    (COALESCE(EXTRACT(epoch FROM (now() - p.oldest_ready)), (0)::numeric))::double precision AS oldest_ready_age,
    y.paused
   FROM ((asyncflow.task_types y
     LEFT JOIN LATERAL ( SELECT count(*) FILTER (WHERE (t.order_time <= now())) AS ready,
            count(*) FILTER (WHERE (t.order_time > now())) AS delayed,
            min(t.order_time) FILTER (WHERE (t.order_time <= now())) AS oldest_ready
           FROM asyncflow.tasks t
          WHERE ((t.task_type = y.task_type) AND (t.status = 'pending'::asyncflow.task_status))) p ON (true))
     LEFT JOIN LATERAL ( SELECT count(*) AS running
           FROM asyncflow.tasks t
          WHERE ((t.task_type = y.task_type) AND (t.status = 'running'::asyncflow.task_status))) r ON (true));

CREATE TABLE asyncflow.queue_limits (
    task_type text NOT NULL,
    queue_key text NOT NULL,
    concurrency integer NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT queue_limits_concurrency_check CHECK (((concurrency >= 0) AND (concurrency <= 1000000))),
    CONSTRAINT queue_limits_queue_key_check CHECK ((length(queue_key) <= 255))
);

CREATE TABLE asyncflow.refinery_schema_history (
    version integer NOT NULL,
    name character varying(255),
    applied_on character varying(255),
    checksum character varying(255)
);

CREATE TABLE asyncflow.run_days (
    day date NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    dropped_at timestamp with time zone
);

CREATE TABLE asyncflow.run_segments (
    day date NOT NULL,
    segment_id text NOT NULL,
    event_id text NOT NULL,
    run_id text NOT NULL,
    n integer NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    exec_cnt integer DEFAULT 1 NOT NULL,
    item jsonb,
    task_id text,
    result jsonb,
    error text,
    deadline timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    total_cost_ms bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT run_segments_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))
)
PARTITION BY RANGE (day);

CREATE TABLE asyncflow.run_traces (
    day date NOT NULL,
    trace_id uuid DEFAULT gen_random_uuid() NOT NULL,
    run_id text NOT NULL,
    event_id text NOT NULL,
    segment_id text,
    task_id text NOT NULL,
    stage text,
    attempt integer,
    worker text,
    outcome text,
    request jsonb,
    response jsonb,
    error text,
    started_at timestamp with time zone,
    cost_ms bigint,
    created_at timestamp with time zone NOT NULL
)
PARTITION BY RANGE (day);

CREATE TABLE asyncflow.shards (
    task_type text NOT NULL,
    shard integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    closed_at timestamp with time zone,
    dropped_at timestamp with time zone
);

CREATE TABLE asyncflow.stage_times (
    task_type text NOT NULL,
    stage text NOT NULL,
    slot smallint NOT NULL,
    calls bigint DEFAULT 0 NOT NULL,
    seconds double precision DEFAULT 0 NOT NULL,
    buckets bigint[] NOT NULL
);

CREATE TABLE asyncflow.type_counters (
    task_type text NOT NULL,
    slot smallint NOT NULL,
    claimed bigint DEFAULT 0 NOT NULL,
    succeeded bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    retried bigint DEFAULT 0 NOT NULL,
    rescued bigint DEFAULT 0 NOT NULL
);

ALTER TABLE ONLY asyncflow.callbacks
    ADD CONSTRAINT callbacks_pkey PRIMARY KEY (callback_id, day);

ALTER TABLE ONLY asyncflow.config
    ADD CONSTRAINT config_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY asyncflow.enqueue_info
    ADD CONSTRAINT enqueue_info_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (task_type, idempotency_key);

ALTER TABLE ONLY asyncflow.pipeline_counters
    ADD CONSTRAINT pipeline_counters_pkey PRIMARY KEY (pipeline, status, slot);

ALTER TABLE ONLY asyncflow.pipelines
    ADD CONSTRAINT pipelines_pkey PRIMARY KEY (name, version);

ALTER TABLE ONLY asyncflow.positions
    ADD CONSTRAINT positions_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.queue_cursors
    ADD CONSTRAINT queue_cursors_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.queue_limits
    ADD CONSTRAINT queue_limits_pkey PRIMARY KEY (task_type, queue_key);

ALTER TABLE ONLY asyncflow.refinery_schema_history
    ADD CONSTRAINT refinery_schema_history_pkey PRIMARY KEY (version);

ALTER TABLE ONLY asyncflow.run_days
    ADD CONSTRAINT run_days_pkey PRIMARY KEY (day);

ALTER TABLE ONLY asyncflow.run_events
    ADD CONSTRAINT run_events_pkey PRIMARY KEY (event_id, day);

ALTER TABLE ONLY asyncflow.run_segments
    ADD CONSTRAINT run_segments_pkey PRIMARY KEY (segment_id, day);

ALTER TABLE ONLY asyncflow.run_traces
    ADD CONSTRAINT run_traces_pkey PRIMARY KEY (trace_id, day);

ALTER TABLE ONLY asyncflow.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (run_id, day);

ALTER TABLE ONLY asyncflow.shards
    ADD CONSTRAINT shards_pkey PRIMARY KEY (task_type, shard);

ALTER TABLE ONLY asyncflow.stage_times
    ADD CONSTRAINT stage_times_pkey PRIMARY KEY (task_type, stage, slot);

ALTER TABLE ONLY asyncflow.task_types
    ADD CONSTRAINT task_types_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.type_counters
    ADD CONSTRAINT type_counters_pkey PRIMARY KEY (task_type, slot);

CREATE INDEX callbacks_due ON ONLY asyncflow.callbacks USING btree (next_attempt_at) WHERE (status = 'pending'::text);

CREATE INDEX callbacks_run ON ONLY asyncflow.callbacks USING btree (run_id);

CREATE INDEX idempotency_keys_shard ON asyncflow.idempotency_keys USING btree (task_type, shard);

CREATE UNIQUE INDEX pipelines_one_active ON asyncflow.pipelines USING btree (name) WHERE (status = 'active'::text);

CREATE INDEX run_events_deadline ON ONLY asyncflow.run_events USING btree (deadline) WHERE (status = ANY (ARRAY['pending'::text, 'running'::text, 'external'::text]));

CREATE INDEX run_events_run ON ONLY asyncflow.run_events USING btree (run_id);

CREATE INDEX run_segments_deadline ON ONLY asyncflow.run_segments USING btree (deadline) WHERE (status = ANY (ARRAY['pending'::text, 'running'::text]));

CREATE INDEX run_segments_event ON ONLY asyncflow.run_segments USING btree (event_id, n);

CREATE INDEX run_traces_run ON ONLY asyncflow.run_traces USING btree (run_id, created_at);

CREATE INDEX runs_notify_key ON ONLY asyncflow.runs USING btree (notify_key) WHERE (notify_key IS NOT NULL);

CREATE INDEX runs_open ON ONLY asyncflow.runs USING btree (status, deadline) WHERE (status = ANY (ARRAY['scheduled'::asyncflow.run_status, 'running'::asyncflow.run_status]));

CREATE INDEX runs_pipeline ON ONLY asyncflow.runs USING btree (pipeline, created_at);

CREATE INDEX runs_scheduled ON ONLY asyncflow.runs USING btree (run_at) WHERE (status = 'scheduled'::asyncflow.run_status);

CREATE TRIGGER tg_config__enqueue_info AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON asyncflow.config FOR EACH STATEMENT EXECUTE FUNCTION asyncflow.tg_enqueue_info();

CREATE TRIGGER tg_positions__enqueue_info AFTER INSERT OR UPDATE OF end_pos ON asyncflow.positions FOR EACH ROW EXECUTE FUNCTION asyncflow.tg_enqueue_info();

CREATE TRIGGER tg_positions__enqueue_info_gone AFTER DELETE OR TRUNCATE ON asyncflow.positions FOR EACH STATEMENT EXECUTE FUNCTION asyncflow.tg_enqueue_info();

CREATE TRIGGER tg_task_types__enqueue_info AFTER INSERT OR UPDATE ON asyncflow.task_types FOR EACH ROW EXECUTE FUNCTION asyncflow.tg_enqueue_info();

CREATE TRIGGER tg_task_types__functions AFTER INSERT ON asyncflow.task_types FOR EACH ROW EXECUTE FUNCTION asyncflow.tg_task_types__functions();

CREATE TRIGGER tg_task_types__resumed AFTER UPDATE OF paused ON asyncflow.task_types FOR EACH ROW WHEN ((old.paused AND (NOT new.paused))) EXECUTE FUNCTION asyncflow.tg_task_types__resumed();

ALTER TABLE ONLY asyncflow.enqueue_info
    ADD CONSTRAINT enqueue_info_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.idempotency_keys
    ADD CONSTRAINT idempotency_keys_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.positions
    ADD CONSTRAINT positions_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.queue_cursors
    ADD CONSTRAINT queue_cursors_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.queue_limits
    ADD CONSTRAINT queue_limits_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.shards
    ADD CONSTRAINT shards_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

GRANT USAGE ON SCHEMA asyncflow TO asyncflow_client;
GRANT USAGE ON SCHEMA asyncflow TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.advance_begin_pos(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.append_log(p_log jsonb, p_entry jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.cancel_run(run_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.cancel_run(run_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.check_new_type_name(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_report_arrays(p_task_ids text[], p_claim_seqs integer[], p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[], p_delays double precision[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_runs(p_now timestamp with time zone, p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_settings(p_settings jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_task_exists(p_task_type text, p_shard integer, p_id bigint, p_task_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_type_name(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.claim_callbacks(p_owner text, p_limit integer, p_lease integer, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.compile_pipeline(p_name text, p_definition jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.complete_node(run_id text, node text, result jsonb, error text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.complete_node(run_id text, node text, result jsonb, error text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.create_claim_function(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_hold_functions(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_report_function(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_shard(p_task_type text, p_shard integer, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_task(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone, queue_key text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.create_task(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone, queue_key text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.create_task_general(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone, queue_key text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.drop_expired_runs(p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.ensure_run_day(p_day date) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.format_task_id(p_task_type text, p_shard integer, p_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.get_pipeline(name text, version integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.get_pipeline(name text, version integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.get_run(run_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.get_run(run_id text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.get_task(task_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.get_task(task_id text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.graph_index(p_ends integer[], p_nodes integer, OUT edges integer[], OUT at integer[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.graph_reach(p_root integer, p_nodes integer, p_at integer[], p_edges integer[], p_far integer[], p_live boolean[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.held_tasks(p_task_type text, p_owner text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.held_tasks(p_task_type text, p_owner text) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamp with time zone, p_single boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.is_integral(p_value jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.is_jsonpath(p_text text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.is_timestamptz(p_text text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.list_pipelines() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_pipelines() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.list_runs(pipeline text, status text, p_limit integer, p_before text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_runs(pipeline text, status text, p_limit integer, p_before text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.list_tasks(p_task_type text, p_status asyncflow.task_status, p_stage text, p_user_id text, p_after text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_tasks(p_task_type text, p_status asyncflow.task_status, p_stage text, p_user_id text, p_after text, p_limit integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.next_due(p_task_type text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.next_due(p_task_type text) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.parse_task_id(p_task_id text, OUT task_type text, OUT shard integer, OUT id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.pipeline_error(p_message text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.pipeline_json(p asyncflow.pipelines) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.plan_step_limit() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.plan_steps(p_plan jsonb, OUT plan jsonb, OUT path text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.put_pipeline(name text, definition jsonb, status text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.put_pipeline(name text, definition jsonb, status text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.queue_keys(p_task_type text, p_after text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.queue_keys(p_task_type text, p_after text, p_limit integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.raise_error(p_code text, p_message text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.record_callback(p_callback_id text, p_attempt integer, p_http_status integer, p_error text, p_cost_ms integer, p_give_up boolean, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.refresh_enqueue_info(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.register_task_type(task_type text, settings jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.register_task_type(task_type text, settings jsonb) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.report_task_arrays(p_owner text, p_task_ids text[], p_claim_seqs integer[], p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[], p_delays double precision[], p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.report_task_arrays(p_owner text, p_task_ids text[], p_claim_seqs integer[], p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[], p_delays double precision[], p_now timestamp with time zone) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.rescue_expired(p_now timestamp with time zone, p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.retry_backoff(p_attempt integer, p_max integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.retry_node(run_id text, node text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.retry_node(run_id text, node text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.retry_run(run_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.retry_run(run_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.roll_shard(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.run_day(p_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.run_json(r asyncflow.runs) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.set_pipeline_status(name text, version integer, status text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.set_pipeline_status(name text, version integer, status text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.set_queue_indexes(p_task_type text, p_on boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.set_queue_limit(p_task_type text, p_queue_key text, p_concurrency integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.set_queue_limit(p_task_type text, p_queue_key text, p_concurrency integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.shard_is_live(p_task_type text, p_shard integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.shorten(p_text text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.stage_time_bounds() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.start_run(pipeline text, input jsonb, notify_url text, run_at timestamp with time zone, notify_key text, version integer, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.start_run(pipeline text, input jsonb, notify_url text, run_at timestamp with time zone, notify_key text, version integer, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.task_json(t asyncflow.tasks) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.task_log(t asyncflow.tasks) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.task_type_json(p asyncflow.task_types) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_enqueue_info() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_task_types__functions() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_task_types__resumed() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_tasks__workflow() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wake(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_activate(p_run asyncflow.runs, p_node text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_arrive(p_run asyncflow.runs, p_node text, p_live boolean, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_begin_run(p_run_id text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_cancel_task(p_task_id text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_close_event_work(p_day date, p_event_id text, p_task_id text, p_child_run text, p_node_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_complete_event(p_event_id text, p_result jsonb, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_create_tasks(p_node jsonb, p_contexts jsonb, p_refs text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_data(p_run asyncflow.runs) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_end_event(p_event_id text, p_status text, p_result jsonb, p_error text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_enqueue_callback(p_run asyncflow.runs, p_kind text, p_event_id text, p_url text, p_payload jsonb, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_fail_event(p_event_id text, p_error text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_finish_run(p_run_id text, p_status asyncflow.run_status, p_result jsonb, p_error text, p_now timestamp with time zone, p_notify boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_get_run(p_run_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_inputs(p_run asyncflow.runs, p_node jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_new_run(p_pipeline text, p_version integer, p_input jsonb, p_notify_url text, p_notify_key text, p_run_at timestamp with time zone, p_parent_event text, p_depth integer, p_attempt integer, p_retry_of text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_node_context(p_run asyncflow.runs, p_node text, p_inputs jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_plan(p_run asyncflow.runs) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_rerun_event(p_run asyncflow.runs, p_event asyncflow.run_events, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_run_error(p_code text, p_message text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_run_for_update(p_run_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_start_segments(p_run asyncflow.runs, p_node text, p_def jsonb, p_inputs jsonb, p_ns integer[], p_items jsonb[], p_count integer, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_task_changed(p_ref text, p_task_id text, p_status asyncflow.task_status, p_result jsonb, p_error text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_watch_type(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.workflow_figures() FROM PUBLIC;

GRANT SELECT ON TABLE asyncflow.queue_depth TO asyncflow_client;

