-- V31: what the checker cannot do for one run fails that run (or node) alone.
--
-- check_runs did everything in one statement: when one item raised, the whole pass rolled back,
-- and since that item stayed among the oldest, every later pass failed the same way: no run
-- began, timed out or was retried any more (found by a bug hunt). Seen with a timed-out run whose
-- retry needed its version, retired meanwhile by a newer `pipeline apply` (AF013), and with a
-- delayed run of a pipeline too deep to start (54001). Now each item runs in a block of its own:
-- - a scheduled run that cannot begin fails, with the reason;
-- - a node (or segment) whose restart fails fails, with the reason;
-- - a run whose retry cannot be made times out as it would without retries, the reason in its
--   error, and calls back.
-- The function is replaced whole (the migration convention); only these branches changed.

create or replace function asyncflow.check_runs(p_now timestamptz default null, p_limit integer default 500)
returns table(action text, id text, detail text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
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
