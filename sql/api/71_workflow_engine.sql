-- The workflow engine: runs, events and segments move as their tasks end (wf_* are private).
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- The day of a run id, null when the id does not hold a real date (not a 22008 error).
-- Nested CASEs: each cast runs only on what the test before it allowed.
create or replace function asyncflow.run_day(p_id text) returns date
language sql immutable parallel safe as $$
  select case when p_id ~ '^r[0-9]{8}-[0-9a-f]{32}' then
    case when substr(p_id, 2, 4)::integer >= 1 and substr(p_id, 6, 2)::integer between 1 and 12 then
      case when substr(p_id, 8, 2)::integer between 1 and extract(day from make_date(substr(p_id, 2, 4)::integer,
          substr(p_id, 6, 2)::integer, 1) + interval '1 month' - interval '1 day')::integer
        then make_date(substr(p_id, 2, 4)::integer, substr(p_id, 6, 2)::integer, substr(p_id, 8, 2)::integer)
      end
    end
  end
$$;

-- Creates the day's partition of every run table unless it exists. Runs rarely: the checker
-- creates today's and tomorrow's ahead of need. Leaves are created alone and then attached
-- (SHARE UPDATE EXCLUSIVE on the parent, like create_shard); the names are built from a date.
create or replace function asyncflow.ensure_run_day(p_day date) returns void
language plpgsql as $$
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

create or replace function asyncflow.wf_run_error(p_code text, p_message text) returns void
    language plpgsql
    as $$
begin
  -- cut (shorten): the message may repeat a caller's value of any size
  raise exception using errcode = p_code, message = asyncflow.shorten(p_message);
end
$$;

-- The run's data for routers and items: {"input", "nodes": {<node>: <result>}}.
create or replace function asyncflow.wf_data(p_run asyncflow.runs) returns jsonb
language sql stable as $$
  select jsonb_build_object('input', p_run.input, 'nodes', coalesce((
    select jsonb_object_agg(e.node, coalesce(e.result, 'null'::jsonb)) from asyncflow.run_events e
    where e.day = p_run.day and e.run_id = p_run.run_id and e.status = 'succeeded'), '{}'::jsonb))
$$;

-- The results of a node's predecessors that succeeded: {<predecessor>: <result>}.
create or replace function asyncflow.wf_inputs(p_run asyncflow.runs, p_node jsonb) returns jsonb
language sql stable as $$
  select coalesce(jsonb_object_agg(e.node, coalesce(e.result, 'null'::jsonb)), '{}'::jsonb)
  from asyncflow.run_events e
  where e.day = p_run.day and e.event_id in (select p_run.run_id || '_' || x from jsonb_array_elements_text(p_node -> 'in') x)
    and e.status = 'succeeded'
$$;

create or replace function asyncflow.wf_plan(p_run asyncflow.runs) returns jsonb
language sql stable as $$
  select plan from asyncflow.pipelines where name = p_run.pipeline and version = p_run.version
$$;

create or replace function asyncflow.wf_get_run(p_run_id text) returns asyncflow.runs
language sql stable as $$
  select * from asyncflow.runs where day = asyncflow.run_day(p_run_id) and run_id = p_run_id
$$;

-- Cancels a task of the run unless it already ended (the trigger then finds its event closed).
create or replace function asyncflow.wf_cancel_task(p_task_id text, p_now timestamptz) returns void
language plpgsql as $$
begin
  if p_task_id is not null then
    perform asyncflow.cancel_task(p_task_id, p_now);
  end if;
exception when sqlstate 'AF007' then
  null; -- its shard was dropped: nothing left to cancel
end
$$;

-- Stops whatever still works for an event that ended early: its task, its open segments' tasks,
-- its child run, its pending callback.
create or replace function asyncflow.wf_close_event_work(p_day date, p_event_id text, p_task_id text, p_child_run text,
  p_node_type text, p_now timestamptz) returns void
language plpgsql as $$
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

-- Ends a run (succeeded, failed, timed_out, cancelled): open events are cancelled with their
-- tasks and child runs, the parent event (sub-pipeline) hears of it, and the outcome goes to the
-- notify_url unless p_notify is false (a timed-out run the checker retries as a new run).
create or replace function asyncflow.wf_finish_run(p_run_id text, p_status asyncflow.run_status, p_result jsonb, p_error text,
  p_now timestamptz, p_notify boolean default true) returns void
language plpgsql as $$
declare
  v_run asyncflow.runs;
  v_open record;
  v_node text;
  v_url text;
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
    -- a callback node runs once even when the run ends before reaching it: its POST says so
    -- (reached: false) with the run's outcome
    if v_open.node_type = 'callback' and v_open.cancelled_from = 'waiting' then
      v_node := substr(v_open.event_id, length(v_run.run_id) + 2);
      v_url := coalesce(asyncflow.wf_plan(v_run) -> 'nodes' -> v_node ->> 'url', v_run.notify_url);
      if v_url is not null then
        perform asyncflow.wf_enqueue_callback(v_run, 'node', v_open.event_id, v_url, jsonb_build_object(
          'run_id', v_run.run_id, 'pipeline', v_run.pipeline, 'version', v_run.version, 'node', v_node,
          'notify_key', v_run.notify_key, 'input', v_run.input, 'reached', false, 'status', v_run.status,
          'error', v_run.error), p_now);
      end if;
    end if;
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

create or replace function asyncflow.wf_enqueue_callback(p_run asyncflow.runs, p_kind text, p_event_id text, p_url text,
  p_payload jsonb, p_now timestamptz) returns text
language plpgsql as $$
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

-- Ends an open event (pending, running or external) as succeeded or failed; the event as it is
-- now, or a row of nulls when it was not open (already ended, or its run ended first).
create or replace function asyncflow.wf_end_event(p_event_id text, p_status text, p_result jsonb, p_error text,
  p_now timestamptz) returns asyncflow.run_events
language plpgsql as $$
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

-- An event failed: the run fails with it.
create or replace function asyncflow.wf_fail_event(p_event_id text, p_error text, p_now timestamptz) returns void
language plpgsql as $$
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

-- An event succeeded: its out-edges are resolved (a router's chosen edge live, the rest skipped).
create or replace function asyncflow.wf_complete_event(p_event_id text, p_result jsonb, p_now timestamptz) returns void
language plpgsql as $$
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

-- One in-edge of p_node is resolved (p_live: taken, or skipped by a router).
create or replace function asyncflow.wf_arrive(p_run asyncflow.runs, p_node text, p_live boolean, p_now timestamptz) returns void
language plpgsql as $$
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

-- The context a node's function is called with.
create or replace function asyncflow.wf_node_context(p_run asyncflow.runs, p_node text, p_inputs jsonb) returns jsonb
language sql immutable as $$
  select jsonb_build_object('run_id', p_run.run_id, 'pipeline', p_run.pipeline, 'version', p_run.version,
    'node', p_node, 'event_id', p_run.run_id || '_' || p_node, 'input', p_run.input, 'inputs', p_inputs)
$$;

-- Creates the tasks of a node (one, or one per segment) and links them to the run; each carries
-- the run's trace context (p_traceparent). Errors that the task engine raises for this input (too
-- large a context, say) fail the node, not the caller.
create or replace function asyncflow.wf_create_tasks(p_node jsonb, p_contexts jsonb, p_refs text[],
  p_traceparent text default null) returns text[]
language plpgsql as $$
declare
  v_ids text[];
begin
  select array_agg(id order by k) into v_ids
  from asyncflow.create_tasks(p_node ->> 'function', (
    select jsonb_agg(jsonb_strip_nulls(jsonb_build_object('context', c, 'stage', p_node -> 'stage',
      'priority', p_node -> 'priority', 'traceparent', p_traceparent)) order by k)
    from jsonb_array_elements(p_contexts) with ordinality x(c, k))) with ordinality y(id, k);
  update asyncflow.tasks t set run_ref = l.ref
  from (select (asyncflow.parse_task_id(i)).*, r as ref from unnest(v_ids, p_refs) u(i, r)) l
  where t.task_type = l.task_type and t.shard = l.shard and t.id = l.id;
  return v_ids;
end
$$;

create or replace function asyncflow.wf_activate(p_run asyncflow.runs, p_node text, p_now timestamp with time zone) returns void
    language plpgsql
    as $$
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
  -- a task node's executions are its task's calls, counted at each claim (wf_task_changed)
  update asyncflow.run_events set status = 'running', activations = activations + 1,
    exec_cnt = exec_cnt + case when v_type = 'task' and v_def ->> 'function' is not null then 0 else 1 end,
    started_at = coalesce(started_at, p_now),
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
          array[v_event_id], p_run.traceparent);
        -- the node's timeout runs from its task's claim (wf_task_changed), not while it waits
        -- in the queue: the run's own timeout bounds the wait
        update asyncflow.run_events set status = 'pending', task_id = v_ids[1], deadline = null, updated_at = p_now
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
      -- the runs above, up to the root: the steps each adds around the sub-pipeline node
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
        -- counted on the root; rolled back with the child when wf_new_run raises
        update asyncflow.runs set sub_runs = sub_runs + 1
        where day = v_root.day and run_id = v_root.run_id and sub_runs < 1000;
        if not found then
          perform asyncflow.wf_fail_event(v_event_id, format('run %s has started 1000 sub-pipeline runs in its tree, '
            'the limit for one run', v_root.run_id), p_now);
        else
          v_child := asyncflow.wf_new_run(v_def ->> 'pipeline', (v_def ->> 'version')::integer,
            jsonb_build_object('parent_run', p_run.run_id, 'input', p_run.input, 'inputs', v_inputs),
            null, p_run.notify_key, null, v_event_id, p_run.depth + 1, 1, null, p_now, p_run.traceparent);
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

-- Starts (again) segments of a dynamic node: the items p_items (numbered p_ns) out of p_count,
-- each given the node's inputs (p_inputs, the predecessors' results).
create or replace function asyncflow.wf_start_segments(p_run asyncflow.runs, p_node text, p_def jsonb, p_inputs jsonb,
  p_ns integer[], p_items jsonb[], p_count integer, p_now timestamptz) returns void
language plpgsql as $$
declare
  v_event_id text := p_run.run_id || '_' || p_node;
  v_ctx jsonb := asyncflow.wf_node_context(p_run, p_node, p_inputs);
  v_ids text[];
begin
  v_ids := asyncflow.wf_create_tasks(p_def,
    (select jsonb_agg(v_ctx || jsonb_build_object('segment', jsonb_build_object('n', n, 'count', p_count,
       'id', v_event_id || '_' || n, 'item', item)) order by k)
     from unnest(p_ns, p_items) with ordinality u(n, item, k)),
    array(select v_event_id || '#' || n from unnest(p_ns) n), p_run.traceparent);
  insert into asyncflow.run_segments as s (day, segment_id, event_id, run_id, n, status, item, task_id, deadline,
    created_at, updated_at)
  select p_run.day, v_event_id || '_' || n, v_event_id, p_run.run_id, n, 'pending', item, v_ids[k],
    null, p_now, p_now
  from unnest(p_ns, p_items) with ordinality u(n, item, k)
  on conflict (segment_id, day) do update set status = 'pending', activations = s.activations + 1, task_id = excluded.task_id,
    deadline = excluded.deadline, result = null, error = null, finished_at = null, updated_at = p_now;
  update asyncflow.run_events set status = 'pending', segment_cnt = p_count, updated_at = p_now
  where day = p_run.day and event_id = v_event_id;
end
$$;

-- A task of a run ended (or, p_status = 'running', was claimed).
-- A node's task started again after a timeout keeps its place in the queue: the new task takes
-- the old one's order_time when that is earlier (a restart at the back of the queue would wait
-- behind everything enqueued since, and could time out again for that alone).
create or replace function asyncflow.wf_keep_place(p_old_task_id text, p_new_task_id text) returns void
language plpgsql as $$
declare
  v_old record;
  v_new record;
  v_order timestamptz;
begin
  select * into v_old from asyncflow.parse_task_id(p_old_task_id);
  select * into v_new from asyncflow.parse_task_id(p_new_task_id);
  if v_old.task_type is null or v_new.task_type is null then
    return;
  end if;
  select t.order_time into v_order from asyncflow.tasks t
  where t.task_type = v_old.task_type and t.shard = v_old.shard and t.id = v_old.id;
  update asyncflow.tasks t set order_time = v_order
  where t.task_type = v_new.task_type and t.shard = v_new.shard and t.id = v_new.id
    and t.status = 'pending' and t.order_time > v_order;
end
$$;

-- A node's timeout (seconds in its plan entry) as an interval.
create or replace function asyncflow.wf_node_timeout(p_run_id text, p_node text) returns interval
language sql stable as $$
  select make_interval(secs => (asyncflow.wf_plan(asyncflow.wf_get_run(p_run_id)) -> 'nodes' -> p_node
    ->> 'timeout')::double precision)
$$;

create or replace function asyncflow.wf_task_changed(p_ref text, p_task_id text, p_status asyncflow.task_status, p_result jsonb,
  p_error text, p_now timestamptz) returns void
language plpgsql as $$
declare
  v_event_id text := split_part(p_ref, '#', 1);
  v_day date := asyncflow.run_day(p_ref);
  v_n integer := nullif(split_part(p_ref, '#', 2), '')::integer;
  v_event asyncflow.run_events;
  v_seg asyncflow.run_segments;
begin
  if v_n is null then
    if p_status = 'running' then
      -- claimed: the node's timeout runs from now, for this call
      update asyncflow.run_events e set status = 'running', updated_at = p_now, exec_cnt = e.exec_cnt + 1,
        deadline = p_now + asyncflow.wf_node_timeout(e.run_id, e.node)
      where day = v_day and event_id = v_event_id and status in ('pending', 'running') and task_id = p_task_id;
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
    update asyncflow.run_segments s set status = 'running', started_at = coalesce(started_at, p_now), updated_at = p_now,
      exec_cnt = s.exec_cnt + 1,
      deadline = p_now + asyncflow.wf_node_timeout(s.run_id, (select e.node from asyncflow.run_events e
        where e.day = v_day and e.event_id = v_event_id))
    where day = v_day and segment_id = v_event_id || '_' || v_n and status in ('pending', 'running')
      and task_id = p_task_id;
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

-- Fires on every status change of a task that works for a run: records the call (trace) and
-- moves the run on. Anything unexpected fails the run rather than the worker's report (which
-- would otherwise be refused again and again); lock and serialization errors are raised so the
-- report is retried whole. A success's trace takes its outcome from the status.
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
      -- a success writes no log entry (see task_log): its outcome is the status
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

-- The trigger is created per task type, on asyncflow.tasks_<type> (and so on each of its shards,
-- present and future), by put_pipeline for the functions a pipeline names: a type no pipeline
-- uses has no trigger at all, so its claims and reports pay nothing for workflows (a row trigger,
-- even one whose WHEN is false, makes every UPDATE fetch the old row again for it). Creating it
-- takes a SHARE ROW EXCLUSIVE lock on the type's tasks for a moment, once.
-- Under a per-type advisory lock, (16715, hashtext(type)): of two pipelines naming the same type,
-- put concurrently, both would find no trigger and the second would fail to create it (42710);
-- with the lock the second waits for the first and finds its trigger.
create or replace function asyncflow.wf_watch_type(p_task_type text) returns void
language plpgsql as $$
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

-- Creates a run (scheduled) with its events, and begins it when due. The one way runs are made:
-- start_run, retry_run, the checker's run retries and sub-pipeline nodes all come here.
create or replace function asyncflow.wf_new_run(p_pipeline text, p_version integer, p_input jsonb, p_notify_url text,
  p_notify_key text, p_run_at timestamptz, p_parent_event text, p_depth integer, p_attempt integer, p_retry_of text,
  p_now timestamptz, p_traceparent text default null) returns text
language plpgsql as $$
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
    -- a name nothing was ever applied under says so, rather than "no active version"
    perform asyncflow.wf_run_error('AF011', case
      when not exists (select from asyncflow.pipelines p where p.name = p_pipeline)
        then format('unknown pipeline %L: no version of it was applied', p_pipeline)
      when p_version is null
        then format('pipeline %L has no active version (activate one: asyncflow pipeline activate)', p_pipeline)
      else format('unknown pipeline %L version %s', p_pipeline, p_version) end);
  end if;
  -- a retired version starts no new runs, but for a sub-pipeline node pinned to it: a new version
  -- of the child does not break the parents that name their version
  if v_pipe.status = 'retired' and not (p_parent_event is not null and p_version is not null) then
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
  elsif not asyncflow.traceparent_ok(p_traceparent) then
    perform asyncflow.raise_error('AF006', format('traceparent must be a W3C trace context '
      '(00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros), got %s', to_jsonb(left(p_traceparent, 100))));
  end if;
  perform asyncflow.ensure_run_day(v_day);
  insert into asyncflow.runs (day, run_id, pipeline, version, status, input, notify_url, notify_key, parent_event,
    depth, attempt, retry_of, run_at, created_at, updated_at, traceparent)
  values (v_day, v_run_id, p_pipeline, v_pipe.version, 'scheduled', coalesce(p_input, '{}'::jsonb), p_notify_url,
    p_notify_key, p_parent_event, p_depth, p_attempt, p_retry_of, coalesce(p_run_at, p_now), p_now, p_now, p_traceparent);
  insert into asyncflow.run_events (day, event_id, run_id, node, node_type, in_degree, created_at, updated_at)
  select v_day, v_run_id || '_' || n, v_run_id, n, v_pipe.plan -> 'nodes' -> n ->> 'type',
    (v_pipe.plan -> 'nodes' -> n ->> 'in_degree')::integer, p_now, p_now
  from jsonb_array_elements_text(v_pipe.plan -> 'order') n;
  if coalesce(p_run_at, p_now) <= p_now then
    perform asyncflow.wf_begin_run(v_run_id, p_now);
  end if;
  return v_run_id;
end
$$;

-- A scheduled run begins: its deadline is set and its start node runs.
create or replace function asyncflow.wf_begin_run(p_run_id text, p_now timestamptz) returns void
language plpgsql as $$
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

-- The run, or AF012.
create or replace function asyncflow.wf_run_for_update(p_run_id text) returns asyncflow.runs
language plpgsql as $$
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

-- Runs an event again: a dynamic node only its segments that did not succeed, any other node
-- from the start.
create or replace function asyncflow.wf_rerun_event(p_run asyncflow.runs, p_event asyncflow.run_events, p_now timestamptz)
returns void
language plpgsql as $$
declare
  v_def jsonb := asyncflow.wf_plan(p_run) -> 'nodes' -> p_event.node;
  v_ns integer[];
  v_items jsonb[];
begin
  if p_event.node_type = 'dynamic' and p_event.segment_cnt > 0 then
    select array_agg(s.n order by s.n), array_agg(s.item order by s.n) into v_ns, v_items
    from asyncflow.run_segments s
    where s.day = p_event.day and s.event_id = p_event.event_id and s.status <> 'succeeded';
    update asyncflow.run_events set status = 'running', exec_cnt = exec_cnt + 1, activations = activations + 1,
      error = null, cancelled_from = null,
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
