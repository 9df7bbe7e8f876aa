-- Progress and checkpoints posted by a running call itself (an HTTP function, through POST
-- /v1/worker/progress and /v1/worker/checkpoint) rather than carried by its worker's heartbeat,
-- and a checkpoint its worker writes for it (a warm instance's line, a Rust handler's call).
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
-- 5 s: wait_for_hold) for a worker's hold of it to end.
create or replace function asyncflow.set_progress(p_task_id text, p_claim_seq bigint, p_progress jsonb)
returns table (accepted boolean, status asyncflow.task_status)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
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
  perform asyncflow.wait_for_hold(v_key.task_type, v_key.shard, v_key.id, p_claim_seq);
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

-- wait_for_hold: a worker's held claim (templates/hold.sql) writes the task as running with its
-- claim_seq only when the hold ends (its window, 20 ms by default): until then the task reads as
-- pending with the claim_seq before. A newer claim_seq than that may be the hold's, so a write
-- fenced by p_claim_seq that found no running task waits here for the row's lock (the hold's
-- end) and looks again; a claim_seq no newer is stale at once. A hold still open after
-- lock_timeout (5 s) is given up: the write is refused as not running, and nothing changed.
create or replace function asyncflow.wait_for_hold(p_task_type text, p_shard integer, p_id bigint, p_claim_seq bigint)
returns void
language plpgsql set search_path = pg_catalog, pg_temp set lock_timeout = '5s' as $$
begin
  perform 1 from asyncflow.tasks t
  where t.task_type = p_task_type and t.shard = p_shard and t.id = p_id
    and t.status = 'pending' and t.claim_seq < p_claim_seq
  for update;
exception when lock_not_available then
  null;
end
$$;

-- checkpoint_task: a running call saves its context without ending: the task's whole context
-- becomes p_context (a JSON object within max_context_bytes), so a retry of the stage (after a
-- failure, a lost lease, a crash) starts from it. Fenced like every report: applied only while
-- the task is running under the claim that handed out p_claim_seq; otherwise false, and nothing
-- changed. Errors: AF007 (no such task), AF006 (a claim_seq or context missing, a context that
-- is not an object or breaks the JSON rule), AF005 (too large); nothing changed. Locks: the
-- task's row, and waits (at most 5 s: wait_for_hold) for a worker's hold of it to end.
create or replace function asyncflow.checkpoint_task(task_id text, claim_seq bigint, context jsonb) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  p_task_id alias for $1;
  p_claim_seq alias for $2;
  p_context alias for $3;
  v_key record;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
  if p_claim_seq is null then
    perform asyncflow.raise_error('AF006', 'claim_seq must be an integer, got null');
  elsif p_context is null or jsonb_typeof(p_context) <> 'object' then
    perform asyncflow.raise_error('AF006', format('context must be a JSON object, got %s',
      coalesce(jsonb_typeof(p_context), 'nothing')));
  end if;
  perform asyncflow.check_context(p_context);
  for v_round in 1 .. 2 loop
    update asyncflow.tasks t set context = p_context, updated_at = now()
    where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id
      and t.status = 'running' and t.claim_seq = p_claim_seq;
    if found then
      return true;
    end if;
    if v_round = 1 then
      perform asyncflow.wait_for_hold(v_key.task_type, v_key.shard, v_key.id, p_claim_seq);
    end if;
  end loop;
  perform asyncflow.check_task_exists(v_key.task_type, v_key.shard, v_key.id, p_task_id);
  return false;
end
$$;
