-- V40: a retry by hand and the begin_pos pass no longer race, and neither the pass nor the shard
-- roller waits on an application's open transaction.
--
-- 1. retry_task makes a task pending in its own, possibly old, shard and lowers begin_pos to
--    it. It locked the type's positions row only when begin_pos was above the shard. When it
--    was not, an advance_begin_pos pass running before the retry committed did not see the
--    task (MVCC), found the shard dead, closed it and moved begin_pos past it; the retry then
--    committed a pending task below begin_pos, which no claim reads until the next pass moved
--    begin_pos back. retry_task now always takes the positions row FOR KEY SHARE first: it
--    conflicts with the FOR UPDATE of advance_begin_pos and roll_shard, and not with another
--    retry's KEY SHARE or its UPDATE of begin_pos (a non-key column), so two retries never
--    deadlock on it.
-- 2. That lock lasts until the application commits. advance_begin_pos and roll_shard take the
--    positions row under a 1 s lock_timeout and, when it is busy, change nothing and say so
--    (advance_begin_pos returns begin_pos as it is, roll_shard null): the pass tries again next
--    time instead of holding the maintenance loop, and every other type, behind one transaction.
--    (The same wait already happened when a retry lowered begin_pos.)
-- Functions are replaced whole (the migration convention).

CREATE OR REPLACE FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
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

CREATE OR REPLACE FUNCTION asyncflow.advance_begin_pos(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
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

CREATE OR REPLACE FUNCTION asyncflow.roll_shard(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
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
