-- V34: one long-delayed (or otherwise long-lived) task keeps only its own shard from retention.
--
-- begin_pos is the oldest shard that holds a pending or running task, and advance_begin_pos
-- closed (stamped closed_at on) only the shards below it; drop_expired_shards dropped only closed
-- shards below begin_pos. So a single task delayed by a month, or a task retried by hand in an
-- old shard, kept every newer shard of its type, finished or not, for as long as it lived: the
-- table grew without bound behind it (found by a bug hunt).
--
-- Now every shard below the end one is closed when it holds no live task and opened when it
-- does, wherever it lies; drop_expired_shards drops any closed shard past its retention (still
-- locking it and looking again first, a live one reopening). begin_pos keeps its meaning, the
-- oldest live shard, where claims start: the closed shards above it that claims still pass hold
-- no ready task (an empty walk of their ready index) until they are dropped. retry_task reopens
-- only its task's shard.
--
-- advance_begin_pos, drop_expired_shards and retry_task are replaced whole (the migration
-- convention).

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
begin
  select * into v_pos from asyncflow.positions where task_type = p_task_type for update;
  if not found then
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
CREATE OR REPLACE FUNCTION asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF integer
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