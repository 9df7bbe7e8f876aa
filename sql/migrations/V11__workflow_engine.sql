-- The workflow engine: moving runs through their plans. Everything happens inside the
-- transaction that changed something (a report, a claim, a rescue, a cancel, a start), so a run
-- never loses a step: either the task's end and the next nodes' tasks commit together, or
-- neither does.
--
--   start_run -> event(start) succeeded -> arrive(each successor)
--   arrive(node):  latch_cnt + 1 under the event's row lock (concurrent parents queue on it, so
--                  exactly one of them sees latch_cnt = in_degree and activates the node)
--   activate(node) by type:
--     start, parallel   succeed at once with their inputs
--     router            succeed at once; only the chosen edge is live, the others carry a skip
--     task              create_task(function, context) with tasks.run_ref = event id
--     dynamic           one task per item (segments), the event succeeds when all have
--     pipeline          start_run(child) with parent_event = this event
--     callback          a callbacks row; succeeds when delivered
--     end               the run succeeds with the end's inputs as its result
--   a task of the run ends (trigger tg_tasks__workflow) -> the event or segment succeeds/fails
--   an event fails -> the run fails: open events cancelled, their tasks cancelled, callback
--
-- A node whose in-edges were all skipped is skipped too (dead-path elimination), so joins after a
-- router wait only for the branch taken.
-- Node context given to functions:
--   {"run_id", "pipeline", "version", "node", "event_id", "input": <run input>,
--    "inputs": {<predecessor>: <its result>}, "segment": {"n", "count", "id", "item"} (dynamic)}

create function asyncflow.wf_run_error(p_code text, p_message text) returns void
language plpgsql as $$
begin
  raise exception using errcode = p_code, message = p_message;
end
$$;

-- The run's data for routers and items: {"input", "nodes": {<node>: <result>}}.
create function asyncflow.wf_data(p_run asyncflow.runs) returns jsonb
language sql stable as $$
  select jsonb_build_object('input', p_run.input, 'nodes', coalesce((
    select jsonb_object_agg(e.node, coalesce(e.result, 'null'::jsonb)) from asyncflow.run_events e
    where e.day = p_run.day and e.run_id = p_run.run_id and e.status = 'succeeded'), '{}'::jsonb))
$$;

-- The results of a node's predecessors that succeeded: {<predecessor>: <result>}.
create function asyncflow.wf_inputs(p_run asyncflow.runs, p_node jsonb) returns jsonb
language sql stable as $$
  select coalesce(jsonb_object_agg(e.node, coalesce(e.result, 'null'::jsonb)), '{}'::jsonb)
  from asyncflow.run_events e
  where e.day = p_run.day and e.event_id in (select p_run.run_id || '_' || x from jsonb_array_elements_text(p_node -> 'in') x)
    and e.status = 'succeeded'
$$;

create function asyncflow.wf_plan(p_run asyncflow.runs) returns jsonb
language sql stable as $$
  select plan from asyncflow.pipelines where name = p_run.pipeline and version = p_run.version
$$;

create function asyncflow.wf_get_run(p_run_id text) returns asyncflow.runs
language sql stable as $$
  select * from asyncflow.runs where day = asyncflow.run_day(p_run_id) and run_id = p_run_id
$$;

-- Cancels a task of the run unless it already ended (the trigger then finds its event closed).
create function asyncflow.wf_cancel_task(p_task_id text, p_now timestamptz) returns void
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
create function asyncflow.wf_close_event_work(p_day date, p_event_id text, p_task_id text, p_child_run text,
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
create function asyncflow.wf_finish_run(p_run_id text, p_status asyncflow.run_status, p_result jsonb, p_error text,
  p_now timestamptz, p_notify boolean default true) returns void
language plpgsql as $$
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

create function asyncflow.wf_enqueue_callback(p_run asyncflow.runs, p_kind text, p_event_id text, p_url text,
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
create function asyncflow.wf_end_event(p_event_id text, p_status text, p_result jsonb, p_error text,
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
create function asyncflow.wf_fail_event(p_event_id text, p_error text, p_now timestamptz) returns void
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
create function asyncflow.wf_complete_event(p_event_id text, p_result jsonb, p_now timestamptz) returns void
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
create function asyncflow.wf_arrive(p_run asyncflow.runs, p_node text, p_live boolean, p_now timestamptz) returns void
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
create function asyncflow.wf_node_context(p_run asyncflow.runs, p_node text, p_inputs jsonb) returns jsonb
language sql immutable as $$
  select jsonb_build_object('run_id', p_run.run_id, 'pipeline', p_run.pipeline, 'version', p_run.version,
    'node', p_node, 'event_id', p_run.run_id || '_' || p_node, 'input', p_run.input, 'inputs', p_inputs)
$$;

-- Creates the tasks of a node (one, or one per segment) and links them to the run. Errors that
-- the task engine raises for this input (too large a context, say) fail the node, not the caller.
create function asyncflow.wf_create_tasks(p_node jsonb, p_contexts jsonb, p_refs text[]) returns text[]
language plpgsql as $$
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

-- All in-edges of p_node resolved with at least one taken: the node runs.
create function asyncflow.wf_activate(p_run asyncflow.runs, p_node text, p_now timestamptz) returns void
language plpgsql as $$
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
      if p_run.depth >= 8 then
        perform asyncflow.wf_fail_event(v_event_id, 'sub-pipelines nest deeper than 8 levels', p_now);
      else
        v_child := asyncflow.wf_new_run(v_def ->> 'pipeline', (v_def ->> 'version')::integer,
          jsonb_build_object('parent_run', p_run.run_id, 'input', p_run.input, 'inputs', v_inputs),
          null, p_run.notify_key, null, v_event_id, p_run.depth + 1, 1, null, p_now);
        -- the child may have ended already (a pipeline of instant nodes) and completed this event
        update asyncflow.run_events set child_run = v_child, updated_at = p_now where day = p_run.day and event_id = v_event_id;
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
create function asyncflow.wf_start_segments(p_run asyncflow.runs, p_node text, p_def jsonb, p_inputs jsonb,
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

-- A task of a run ended (or, p_status = 'running', was claimed).
create function asyncflow.wf_task_changed(p_ref text, p_task_id text, p_status asyncflow.task_status, p_result jsonb,
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

-- Fires on every status change of a task that works for a run: records the call (trace) and
-- moves the run on. Anything unexpected fails the run rather than the worker's report (which
-- would otherwise be refused again and again); lock and serialization errors are raised so the
-- report is retried whole.
create function asyncflow.tg_tasks__workflow() returns trigger
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
      old.owner, coalesce(v_entry ->> 'outcome', v_entry ->> 'event'), old.context,
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
create function asyncflow.wf_watch_type(p_task_type text) returns void
language plpgsql as $$
begin
  perform asyncflow.check_type_name(p_task_type);
  if not exists (select 1 from pg_trigger g where g.tgname = 'tg_tasks__workflow' and not g.tgisinternal
      and g.tgrelid = format('asyncflow.%I', 'tasks_' || p_task_type)::regclass) then
    execute format('create trigger tg_tasks__workflow after update on asyncflow.%I for each row '
      'when (new.run_ref is not null and old.status is distinct from new.status) '
      'execute function asyncflow.tg_tasks__workflow()', 'tasks_' || p_task_type);
  end if;
end
$$;
