-- Progress posted by a running call itself (an HTTP function, through POST /v1/worker/progress)
-- rather than carried by its worker's heartbeat.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- progress_too_large: what is wrong with a progress value's size (at most 4096 bytes), null when
-- nothing is; the one check of set_progress and of a report's progress (40_report.sql).
create or replace function asyncflow.progress_too_large(p_progress jsonb) returns text
language sql immutable parallel safe as $$
  select case when pg_column_size(p_progress) > 4096
    then 'progress is too large: ' || pg_column_size(p_progress)::text || ' bytes, the limit is 4096' end
$$;

-- set_progress: sets a running task's progress (a small JSON value, at most 4096 bytes), fenced
-- by the claim_seq its claim handed out: applied only while the task is running under that
-- claim, so a call whose lease was taken away, or that has ended, never writes over what its
-- task does next. Changes nothing else: the lease is the worker's, kept by its heartbeats.
-- Returns whether it was applied and the task's status. Errors: AF007 (no such task), AF006 (a
-- progress too large or unreadable); nothing changed. Locks: the task's row, and waits (at most
-- lock_timeout, 5 s) for a worker's hold of it to end.
create or replace function asyncflow.set_progress(p_task_id text, p_claim_seq bigint, p_progress jsonb)
returns table (accepted boolean, status asyncflow.task_status)
language plpgsql security definer set search_path = pg_catalog, pg_temp set lock_timeout = '5s' as $$
#variable_conflict use_column
declare
  v_key record;
  v_status asyncflow.task_status;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
  if p_claim_seq is null then
    perform asyncflow.raise_error('AF006', 'claim_seq must be an integer, got null');
  elsif p_progress is null or jsonb_typeof(p_progress) = 'null' then
    perform asyncflow.raise_error('AF006', 'progress must be a JSON value other than null');
  elsif asyncflow.progress_too_large(p_progress) is not null then
    perform asyncflow.raise_error('AF006', asyncflow.progress_too_large(p_progress));
  elsif not asyncflow.json_ok(p_progress) then
    perform asyncflow.raise_error('AF006', format('progress: %s', asyncflow.json_problem(p_progress)));
  end if;
  update asyncflow.tasks t set progress = p_progress
  where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id
    and t.status = 'running' and t.claim_seq = p_claim_seq;
  if found then
    return query select true, 'running'::asyncflow.task_status;
    return;
  end if;
  -- A worker's held claim (templates/hold.sql) writes the task as running with its claim_seq only
  -- when the hold ends (its window, 20 ms by default): until then the task reads as pending with
  -- the claim_seq before. A newer claim_seq than that may be the hold's, so this waits for the
  -- row's lock (the hold's end) and looks again; a claim_seq no newer is stale at once.
  begin
    perform 1 from asyncflow.tasks t
    where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id
      and t.status = 'pending' and t.claim_seq < p_claim_seq
    for update;
  exception when lock_not_available then
    -- still held past lock_timeout: refused as not running, and nothing changed
    null;
  end;
  update asyncflow.tasks t set progress = p_progress
  where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id
    and t.status = 'running' and t.claim_seq = p_claim_seq;
  if found then
    return query select true, 'running'::asyncflow.task_status;
    return;
  end if;
  select t.status into v_status from asyncflow.tasks t
  where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id;
  if not found then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
  return query select false, v_status;
end
$$;
