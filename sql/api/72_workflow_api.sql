-- The workflow API: runs started, read, cancelled and retried; the run checker, callbacks and
-- run retention.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- start_run: starts a run of the pipeline's active version (or of p_version, unless retired)
-- with this input; its outcome is POSTed to notify_url (with notify_key) when it ends.
-- With run_at in the future the run waits until then (the checker begins it). Returns the run id.
-- The input obeys the JSON rule (asyncflow.json_ok) here, where it comes in; the inputs the engine
-- makes for sub-pipeline runs from it are not checked again.
-- With an idempotency key (1 to 255 characters), a second call with the same pipeline and key
-- starts nothing and returns the first call's run id (whatever its input), for as long as that
-- run's records are kept. With a traceparent (a W3C trace context; AF006 when malformed) the
-- run keeps it and its node tasks carry it, as do its sub-pipeline runs and its retries.
-- Locks: the key's row (a concurrent call with the same key waits for the first to commit or
-- roll back).
create or replace function asyncflow.start_run(
  pipeline text,
  input jsonb default '{}',
  notify_url text default null,
  run_at timestamptz default null,
  notify_key text default null,
  version integer default null,
  p_now timestamptz default null,
  idempotency_key text default null,
  traceparent text default null
) returns text
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now($7);
  v_run_id text;
begin
  perform asyncflow.check_json($2, 'input');
  if $8 is null then
    return asyncflow.wf_new_run($1, $6, $2, $3, $5, $4, null, 0, 1, null, v_now, $9);
  end if;
  if length($8) not between 1 and 255 then
    perform asyncflow.raise_error('AF006', 'idempotency_key must be a string of 1 to 255 characters');
  end if;
  -- the key first: a concurrent call with the same key waits here, then finds it taken
  insert into asyncflow.run_idempotency_keys as k (pipeline, idempotency_key, run_id, day, created_at)
  values ($1, $8, '', (v_now at time zone 'UTC')::date, v_now)
  on conflict do nothing;
  if not found then
    select k.run_id into v_run_id from asyncflow.run_idempotency_keys k
    where k.pipeline = $1 and k.idempotency_key = $8;
    return v_run_id;
  end if;
  v_run_id := asyncflow.wf_new_run($1, $6, $2, $3, $5, $4, null, 0, 1, null, v_now, $9);
  update asyncflow.run_idempotency_keys k set run_id = v_run_id, day = asyncflow.run_day(v_run_id)
  where k.pipeline = $1 and k.idempotency_key = $8;
  update asyncflow.runs r set idempotency_key = $8
  where r.day = asyncflow.run_day(v_run_id) and r.run_id = v_run_id;
  return v_run_id;
end
$$;

-- The public form of a run; its input and result go out through json_out (00_util.sql), as
-- get_run's events, segments, traces and callbacks do.
create or replace function asyncflow.run_json(r asyncflow.runs) returns jsonb
language sql stable as $$
  select asyncflow.json_out(jsonb_build_object('run_id', r.run_id, 'pipeline', r.pipeline, 'version', r.version, 'status', r.status,
    'input', r.input, 'result', r.result, 'error', r.error, 'notify_url', r.notify_url, 'notify_key', r.notify_key,
    'parent_event', r.parent_event, 'attempt', r.attempt, 'retry_of', r.retry_of, 'retried_by', r.retried_by,
    'run_at', r.run_at, 'deadline', r.deadline, 'started_at', r.started_at, 'finished_at', r.finished_at,
    'total_cost_ms', r.total_cost_ms, 'created_at', r.created_at, 'updated_at', r.updated_at,
    'schedule', r.schedule, 'tick', r.tick, 'idempotency_key', r.idempotency_key, 'traceparent', r.traceparent),
    '{input,result}')
$$;

-- get_run: the run with its events (in plan order; a dynamic node's with its segments), the
-- function calls made for it (traces, oldest first, at most 1000) and its callbacks. Null when
-- there is no such run.
create or replace function asyncflow.get_run(run_id text) returns jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_run asyncflow.runs := asyncflow.wf_get_run($1);
begin
  if v_run.run_id is null then
    return null;
  end if;
  return asyncflow.run_json(v_run) || jsonb_build_object(
    'events', coalesce((select jsonb_agg(asyncflow.json_out(jsonb_build_object('event_id', e.event_id, 'node', e.node, 'type', e.node_type,
        'status', e.status, 'exec_cnt', e.exec_cnt, 'activations', e.activations, 'latch_cnt', e.latch_cnt,
        'in_degree', e.in_degree,
        'segment_cnt', e.segment_cnt, 'task_id', e.task_id, 'child_run', e.child_run, 'result', e.result,
        'error', e.error, 'deadline', e.deadline, 'started_at', e.started_at, 'finished_at', e.finished_at,
        'total_cost_ms', e.total_cost_ms)
        || case when e.node_type = 'dynamic' then jsonb_build_object('segments', coalesce((
          select jsonb_agg(asyncflow.json_out(jsonb_build_object('segment_id', s.segment_id, 'n', s.n, 'status', s.status,
            'exec_cnt', s.exec_cnt, 'activations', s.activations, 'task_id', s.task_id, 'item', s.item,
            'result', s.result, 'error', s.error,
            'started_at', s.started_at, 'finished_at', s.finished_at, 'total_cost_ms', s.total_cost_ms),
            '{item,result}') order by s.n)
          from asyncflow.run_segments s where s.day = e.day and s.event_id = e.event_id), '[]'::jsonb)) else '{}'::jsonb end,
        '{result}') order by o.k)
      from asyncflow.run_events e
      join asyncflow.pipelines p on p.name = v_run.pipeline and p.version = v_run.version
      cross join lateral jsonb_array_elements_text(p.plan -> 'order') with ordinality o(node, k)
      where e.day = v_run.day and e.run_id = v_run.run_id and e.node = o.node), '[]'::jsonb),
    'traces', coalesce((select jsonb_agg(asyncflow.json_out(jsonb_build_object('trace_id', t.trace_id,
        'event_id', t.event_id,
        'segment_id', t.segment_id, 'task_id', t.task_id, 'stage', t.stage, 'attempt', t.attempt, 'worker', t.worker,
        'outcome', t.outcome, 'error', t.error, 'started_at', t.started_at, 'cost_ms', t.cost_ms,
        'request', t.request, 'response', t.response), '{request,response}') order by t.created_at, t.trace_id)
      from (select * from asyncflow.run_traces t where t.day = v_run.day and t.run_id = v_run.run_id
            order by t.created_at limit 1000) t), '[]'::jsonb),
    'callbacks', coalesce((select jsonb_agg(asyncflow.json_out(jsonb_build_object('callback_id', c.callback_id, 'kind', c.kind,
        'event_id', c.event_id, 'url', c.url, 'status', c.status, 'attempts', c.attempts, 'last_error', c.last_error,
        'next_attempt_at', c.next_attempt_at, 'give_up_at', c.give_up_at, 'delivered_at', c.delivered_at,
        'log', c.log, 'payload', c.payload), '{log,payload}') order by c.created_at, c.callback_id)
      from asyncflow.callbacks c where c.day = v_run.day and c.run_id = v_run.run_id), '[]'::jsonb));
end
$$;

-- list_runs: runs newest first, optionally of one pipeline and status; keyset pagination with
-- p_before (the run_id of the last run of the previous page).
create or replace function asyncflow.list_runs(pipeline text default null, status text default null, p_limit integer default 100,
  p_before text default null) returns setof jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
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
$$;

-- cancel_run: a scheduled or running run ends cancelled (true); false when it had already ended.
-- It retries when it meets a report in a deadlock.
--
-- A worker's report locks its task's row and then, in the workflow trigger, its run's row;
-- cancel_run locks the run's row and then its tasks' rows. When a run is cancelled while one of
-- its tasks reports, each may wait for the other, and after deadlock_timeout the deadlock
-- detector ends one of them with 40P01. A worker retries its report by itself; so that
-- cancel_run does not raise 40P01 to its caller, it makes each try in a savepoint of its own (a
-- block with an exception handler): a try ended by the detector gives its locks back, the
-- report goes on, and the next try, a moment later, ends the run; at most three tries.
--
-- What the savepoint does not cover: locks the caller took earlier in its own transaction stay
-- held across the tries (if they are part of the deadlock, the three tries end in 40P01 after
-- three deadlock timeouts); in REPEATABLE READ or SERIALIZABLE the first 40P01 is raised at
-- once, as a retry there could only fail; each call opens a subtransaction (many calls in one
-- transaction make many); and a deadlock caught here is not logged as an error.
create or replace function asyncflow.cancel_run(run_id text, p_now timestamptz default null) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_run asyncflow.runs;
  v_now timestamptz := asyncflow.check_now(p_now);
begin
  for v_try in 1..3 loop
    begin
      v_run := asyncflow.wf_run_for_update($1);
      if v_run.status not in ('scheduled', 'running') then
        return false;
      end if;
      perform asyncflow.wf_finish_run(v_run.run_id, 'cancelled', null, 'cancelled by hand', v_now);
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
$$;

-- retry_run: a failed, timed-out or cancelled run is run again as a new run of the same pipeline
-- version, input, notify_url and notify_key. Returns the new run's id.
create or replace function asyncflow.retry_run(run_id text, p_now timestamptz default null) returns text
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_run asyncflow.runs := asyncflow.wf_run_for_update($1);
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
    null, 0, v_run.attempt + 1, v_run.run_id, v_now, v_run.traceparent);
  update asyncflow.runs set retried_by = v_new, updated_at = v_now where day = v_run.day and run_id = v_run.run_id;
  return v_new;
end
$$;

-- retry_node: resumes a run that failed at this node, with a fresh deadline (its outcome is
-- POSTed again when it ends). The nodes the failure cancelled resume where they stood (those
-- only waiting wait again, the ones working run again), then the node itself runs again (a
-- dynamic node only its unfinished segments).
--
-- When one of them fails again at once (a sub-pipeline whose version was retired meanwhile, say),
-- the run fails again and nothing more is started in it: the loop stops once the run is not
-- running, so the retried node never gets a live task in a failed run. Returns true when the run
-- is running again, false when it failed again while its nodes restarted.
create or replace function asyncflow.retry_node(run_id text, node text, p_now timestamp with time zone default null::timestamp with time zone) returns boolean
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $_$
#variable_conflict use_column
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_run asyncflow.runs := asyncflow.wf_run_for_update($1);
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
    -- a node that fails again at once fails the run again: nothing more is started in it
    exit when (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) <> 'running';
  end loop;
  if (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) = 'running' then
    perform asyncflow.wf_rerun_event(v_run, v_event, v_now);
  end if;
  -- true when the run is under way again; false when it failed again while its nodes restarted
  return (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) = 'running';
end
$_$;

-- complete_node: the external completion of an asynchronous node (one waiting in status
-- external): with no error it succeeds with p_result (default: its function's result), with an
-- error it fails, and the run with it.
create or replace function asyncflow.complete_node(run_id text, node text, result jsonb default null, error text default null,
  p_now timestamptz default null) returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_run asyncflow.runs := asyncflow.wf_run_for_update($1);
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
  perform asyncflow.check_json($3, 'result');
  if $4 is null then
    perform asyncflow.wf_complete_event(v_event.event_id, coalesce($3, v_event.result, '{}'::jsonb), v_now);
  else
    perform asyncflow.wf_fail_event(v_event.event_id, $4, v_now);
  end if;
  return asyncflow.run_json(asyncflow.wf_get_run(v_run.run_id));
end
$$;

-- check_runs (the checker): begins scheduled runs that are due; restarts or fails nodes and
-- segments past their deadline (a node's timeout, restarted up to its timeout_retries); times out
-- runs past their deadline, starting them again as new runs while the pipeline's retries allow
-- (the timed-out run then sends no callback; the new one will, with the same notify key); creates
-- today's and tomorrow's run partitions ahead of need. At most p_limit of each kind per call;
-- rows being changed meanwhile are skipped (SKIP LOCKED).
--
-- What the checker cannot do for one run fails that run (or node) alone. If one item's error
-- rolled the whole pass back, that item would stay among the oldest and every later pass would
-- fail the same way: no run would begin, time out or be retried any more (say a timed-out run
-- whose retry needs its version, retired meanwhile by a newer `pipeline apply` (AF013), or a
-- delayed run of a pipeline too deep to start (54001)). So each item runs in a block of its own:
-- - a scheduled run that cannot begin fails, with the reason;
-- - a node (or segment) whose restart fails fails, with the reason;
-- - a run whose retry cannot be made times out as it would without retries, the reason in its
--   error, and calls back.
create or replace function asyncflow.check_runs(p_now timestamptz default null, p_limit integer default 500)
returns table(action text, id text, detail text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
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
        and v_event.activations <= coalesce((v_def ->> 'timeout_retries')::integer, 0) then
      begin
        update asyncflow.run_events set task_id = null where day = v_event.day and event_id = v_event.event_id;
        perform asyncflow.wf_cancel_task(v_event.task_id, v_now);
        perform asyncflow.wf_activate(v_run, v_event.node, v_now);
        perform asyncflow.wf_keep_place(v_event.task_id, (select e.task_id from asyncflow.run_events e
          where e.day = v_event.day and e.event_id = v_event.event_id));
        v_done := true;
      exception when others then
        get stacked diagnostics v_why = message_text;
      end;
    end if;
    if v_done then
      action := 'node restarted';
      detail := format('no result within %s s; try %s', v_def ->> 'timeout', v_event.activations + 1);
    else
      perform asyncflow.wf_fail_event(v_event.event_id,
        format('timed out: no result within %s s (%s tries)', v_def ->> 'timeout', v_event.activations)
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
    if v_seg.activations <= coalesce((v_def ->> 'timeout_retries')::integer, 0) then
      begin
        update asyncflow.run_segments set task_id = null where day = v_seg.day and segment_id = v_seg.segment_id;
        perform asyncflow.wf_cancel_task(v_seg.task_id, v_now);
        perform asyncflow.wf_start_segments(v_run, v_event.node, v_def, asyncflow.wf_inputs(v_run, v_def),
          array[v_seg.n], array[v_seg.item], v_event.segment_cnt, v_now);
        perform asyncflow.wf_keep_place(v_seg.task_id, (select s.task_id from asyncflow.run_segments s
          where s.day = v_seg.day and s.segment_id = v_seg.segment_id));
        v_done := true;
      exception when others then
        get stacked diagnostics v_why = message_text;
      end;
    end if;
    if v_done then
      action := 'segment restarted';
      detail := format('no result within %s s; try %s', v_def ->> 'timeout', v_seg.activations + 1);
    else
      perform asyncflow.wf_fail_event(v_seg.event_id,
        format('segment %s timed out: no result within %s s (%s tries)', v_seg.n, v_def ->> 'timeout', v_seg.activations)
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
          null, null, 0, v_run.attempt + 1, v_run.run_id, v_now, v_run.traceparent);
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

-- claim_callbacks: up to p_limit deliveries that are due, for one sender. Each attempt is
-- counted now and the delivery is held for p_lease seconds (a sender that dies mid-attempt
-- leaves it due again then). Locks: the claimed rows (SKIP LOCKED).
create or replace function asyncflow.claim_callbacks(p_owner text, p_limit integer, p_lease integer default 60,
  p_now timestamptz default null)
returns table (callback_id text, run_id text, kind text, url text, payload jsonb, attempt integer)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_now timestamptz := asyncflow.check_now(p_now);
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
  -- a payload made from a run's input or result written past the API goes out through json_out
  -- (00_util.sql), as readers do: the callback is delivered with decode_error, and the batch
  -- still reads
  returning c.callback_id, c.run_id, c.kind, c.url, asyncflow.json_out(c.payload, '{input,inputs,result}'), c.attempts;
end
$$;

-- record_callback: the outcome of one attempt (fenced by its attempt number). Delivered when
-- p_error is null; otherwise due again after min(2^(attempt-1), callback_max_interval) s, or
-- given up (failed) once past give_up_at, or at once when p_give_up: an attempt whose error will
-- be the same at every attempt (a target that --callback-allow refuses) fails the callback at
-- once, recorded with why, instead of being retried until give_up_at (a day). A callback node
-- succeeds or fails with its delivery. Returns the callback's status, or null when the attempt
-- is stale.
create or replace function asyncflow.record_callback(p_callback_id text, p_attempt integer, p_http_status integer, p_error text, p_cost_ms integer, p_give_up boolean default false, p_now timestamp with time zone default null::timestamp with time zone) returns text
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
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

-- drop_expired_runs: drops, whole, the days of run records older than config.run_retention
-- whose runs have all ended and whose callbacks are settled: no DELETE, no dead tuples. A day
-- with a run still open stays until it ends, and is not locked. Locks: the five
-- tables first (runs waited for up to 1 s, each next one up to 100 ms), then the day's
-- partitions; a busy day waits for the next pass. Returns the dropped days.
create or replace function asyncflow.drop_expired_runs(p_now timestamp with time zone default null::timestamp with time zone) returns setof date
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_day date;
  v_days date[];
  v_table text;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  -- a day that cannot go is not locked at all (checked again under the locks below); the
  -- days are read whole first, since a query still open on a partition keeps it from being dropped
  select coalesce(array_agg(d.day order by d.day), '{}') into v_days
  from asyncflow.run_days d, asyncflow.config c
  where d.dropped_at is null and d.day + 1 <= ((v_now - make_interval(secs => c.run_retention)) at time zone 'UTC')::date
    and not exists (select 1 from asyncflow.runs r where r.day = d.day and r.status in ('scheduled', 'running'))
    and not exists (select 1 from asyncflow.callbacks k where k.day = d.day and k.status = 'pending');
  foreach v_day in array v_days loop
    begin
      -- the tables, then the day's partitions: the order every statement on run records
      -- takes. DROP TABLE of a partition locks its table too; taking the partitions first would
      -- deadlock with a statement holding the table and reaching for the partition.
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
    -- a key lasts as long as its run's records
    delete from asyncflow.run_idempotency_keys k where k.day = v_day;
    return next v_day;
  end loop;
end
$$;

-- workflow_figures: for monitoring. Open runs per pipeline and status (scheduled, running: read
-- through the partial index of open runs), runs ended per pipeline and status (counters, kept
-- past retention), and callbacks waiting for delivery (pipeline '').
create or replace function asyncflow.workflow_figures()
returns table (pipeline text, kind text, status text, n bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select r.pipeline, 'open', r.status::text, count(*) from asyncflow.runs r
  where r.status in ('scheduled', 'running') group by r.pipeline, r.status
  union all
  select k.pipeline, 'ended', k.status::text, sum(k.runs)::bigint from asyncflow.pipeline_counters k
  group by k.pipeline, k.status
  union all
  select '', 'callbacks', 'pending', count(*) from asyncflow.callbacks c where c.status = 'pending'
$$;

-- maintenance_due: whether workflow maintenance has work due now: a scheduled run to begin, a
-- callback to deliver (or out with a deliverer), a node, segment or run past its deadline. An
-- `--exit-when-idle` worker that runs the maintenance services waits while it is true, so that a
-- scale-from-zero worker does not leave a finished run's callback undelivered.
create or replace function asyncflow.maintenance_due(p_now timestamptz default null) returns boolean
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
begin
  return exists (select 1 from asyncflow.runs r where r.status = 'scheduled' and r.run_at <= v_now)
    or exists (select 1 from asyncflow.callbacks b where b.status = 'pending'
               and (b.next_attempt_at <= v_now or b.owner is not null))
    or exists (select 1 from asyncflow.run_events e where e.status in ('pending', 'running', 'external')
               and e.deadline < v_now)
    or exists (select 1 from asyncflow.run_segments s where s.status in ('pending', 'running')
               and s.deadline < v_now)
    or exists (select 1 from asyncflow.runs r where r.status = 'running' and r.deadline < v_now);
end
$$;
