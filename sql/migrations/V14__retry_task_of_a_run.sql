-- retry_task refuses the task of a workflow run: queued again on its own it would run its
-- function with nothing listening for the outcome (the node it worked for has failed, and the
-- run with it). The error names the run and node to retry instead (asyncflow.retry_node), which
-- resumes the run from there. Otherwise as in V4.
create or replace function asyncflow.retry_task(task_id text, p_now timestamptz default null) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
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
  if found then
    update asyncflow.shards set closed_at = null
    where task_type = v_key.task_type and shard >= v_key.shard and dropped_at is null;
  end if;
  perform asyncflow.wake(v_key.task_type);
  return true;
end
$$;
