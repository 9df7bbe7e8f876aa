-- Maintenance: the rescuer, the shard roll, begin_pos and retention of shards.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- rescue_expired: running tasks whose lease ended without a report go back to pending at
-- now + backoff with one more failed try, or to failed when out of tries. Their claim_seq stays,
-- but their status is not running, so the vanished worker's late report is refused; the next claim
-- gives a new claim_seq. Locks: the rescued rows (SKIP LOCKED: a row being reported right now is
-- left for the next pass). At most p_limit tasks per call. Returns each rescued task with its new
-- status and the stage, attempt and error of the try that was rescued (for the rescuer's log).
-- p_skip_owners: workers whose leases are left alone, those running in the rescuer's own
-- process. Their calls are alive, and their reports may be queued behind this statement (a
-- network partition that heals delivers both): rescuing them would run finished calls again.
-- The expired rows are found and locked by a read first, and the update runs only when there
-- are some: an update of tasks is planned over every shard of every type (its rows could be in
-- any), about 25 ms a pass with fifty shards (100 ms in a new session), where the read costs
-- under one; the rescuer passes every second, and a pass almost always finds nothing.
create or replace function asyncflow.rescue_expired(p_now timestamptz default null, p_limit integer default 1000,
  p_skip_owners text[] default null)
returns table (task_id text, task_type text, status asyncflow.task_status, stage text, attempt integer,
  error text)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_ids text[];
  v_types text[];
  v_statuses asyncflow.task_status[];
  v_stages text[];
  v_attempts integer[];
  v_errors text[];
  v_parents text[];
  v_keys_types text[];
  v_keys_shards integer[];
  v_keys_ids bigint[];
begin
  select array_agg(e.task_type), array_agg(e.shard), array_agg(e.id)
    into v_keys_types, v_keys_shards, v_keys_ids
  from (select task_type, shard, id from asyncflow.tasks
    where status = 'running' and lease_until < v_now
      and (p_skip_owners is null or owner <> all(p_skip_owners))
    limit p_limit
    for update skip locked) e;
  if v_keys_ids is null then
    return;
  end if;
  with changed as (
    update asyncflow.tasks t set
      status = case when t.attempt > t.max_retry_num then 'failed' else 'pending' end::asyncflow.task_status,
      order_time = case when t.attempt > t.max_retry_num then t.order_time
        else v_now + asyncflow.retry_wait(t.attempt, t.max_retry_interval) end,
      retry_count = t.retry_count + 1,
      last_error = format('lease expired: no report from worker %s by %s', t.owner, t.lease_until),
      finished_at = case when t.attempt > t.max_retry_num then v_now end,
      schedule_log = asyncflow.append_log(t.schedule_log, jsonb_build_object(
        'worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
        'cost_ms', round(extract(epoch from (v_now - t.claimed_at)) * 1000), 'outcome', 'rescued',
        'error', format('lease expired at %s', t.lease_until))),
      owner = null, lease_until = null, updated_at = v_now
    from unnest(v_keys_types, v_keys_shards, v_keys_ids) e(task_type, shard, id)
    where t.task_type = e.task_type and t.shard = e.shard and t.id = e.id
    returning asyncflow.format_task_id(t.task_type, t.shard, t.id) as task_id, t.task_type, t.status,
      t.stage, t.attempt, t.last_error, t.parent_id
  )
  select array_agg(c.task_id), array_agg(c.task_type), array_agg(c.status), array_agg(c.stage),
    array_agg(c.attempt), array_agg(c.last_error), array_agg(c.parent_id) filter (where c.status = 'failed')
  into v_ids, v_types, v_statuses, v_stages, v_attempts, v_errors, v_parents
  from changed c;
  -- children that failed for good count on their parents' joins (46_children.sql)
  if v_parents is not null then
    perform asyncflow.count_child_ends(v_parents);
  end if;

  insert into asyncflow.type_counters as k (task_type, slot, rescued, failed, in_running, in_pending, in_failed)
  select u.type_name, pg_backend_pid() % 16, count(*), count(*) filter (where u.st = 'failed'), -count(*),
    count(*) filter (where u.st = 'pending'), count(*) filter (where u.st = 'failed')
  from unnest(v_types, v_statuses) u(type_name, st) group by u.type_name
  on conflict (task_type, slot) do update set rescued = k.rescued + excluded.rescued, failed = k.failed + excluded.failed,
    in_running = k.in_running + excluded.in_running, in_pending = k.in_pending + excluded.in_pending,
    in_failed = k.in_failed + excluded.in_failed;

  perform asyncflow.wake(d.type_name)
  from (select distinct u.type_name from unnest(v_types, v_statuses) u(type_name, st) where u.st = 'pending') d;
  -- the waiters of tasks that failed for good (47_task_waiters.sql)
  perform asyncflow.notify_waiters(d.type_name, d.ids)
  from (select u.type_name, array_agg(u.task_id) as ids from unnest(v_ids, v_types, v_statuses) u(task_id, type_name, st)
    where u.st = 'failed' group by u.type_name) d;
  return query select * from unnest(v_ids, v_types, v_statuses, v_stages, v_attempts, v_errors);
end
$$;

create or replace function asyncflow.roll_shard(p_task_type text, p_now timestamp with time zone default null::timestamp with time zone) returns integer
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_max_rows bigint;
  v_end integer;
  v_rows bigint;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  select shard_max_rows into v_max_rows from asyncflow.task_types where task_type = p_task_type;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  -- as in advance_begin_pos: a retry_task's transaction holds this row; past 1 s, no roll
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

-- Whether a shard holds a pending, running or waiting task (each test uses one index: the two
-- partial indexes, and the primary keys of the waits and the joins, which name every waiting task).
create or replace function asyncflow.shard_is_live(p_task_type text, p_shard integer) returns boolean
language sql stable as $$
  select exists (select 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and status = 'pending')
      or exists (select 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and status = 'running')
      or exists (select 1 from asyncflow.waits where task_type = p_task_type and shard = p_shard)
      or exists (select 1 from asyncflow.joins where task_type = p_task_type and shard = p_shard)
$$;

create or replace function asyncflow.advance_begin_pos(p_task_type text, p_now timestamp with time zone default null::timestamp with time zone) returns integer
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_pos asyncflow.positions;
  v_shard integer;
  v_begin integer;
  v_live integer[] := '{}';
  v_lock_timeout text := current_setting('lock_timeout');
begin
  -- a retry_task holds this row until its transaction ends: past 1 s, this pass changes
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
  -- every undropped shard below the end one is looked at, not only those below the first
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

create or replace function asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone default null::timestamp with time zone) returns setof integer
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_shard integer;
  v_leaf text;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  perform asyncflow.check_type_name(p_task_type);
  for v_shard in
    -- any closed shard below the end one, not only those below begin_pos (a shard above
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
      -- the type's table first, then the shard: the order every claim, report and insert
      -- takes them in. DROP TABLE of a shard locks its parent too; taking the shard first would
      -- deadlock with claims holding the parent and waiting for the shard.
      execute format('lock table asyncflow.%I in access exclusive mode', 'tasks_' || p_task_type);
      execute format('lock table asyncflow.%I in access exclusive mode', v_leaf);
      if asyncflow.shard_is_live(p_task_type, v_shard) then
        update asyncflow.shards set closed_at = null where task_type = p_task_type and shard = v_shard;
        update asyncflow.positions set begin_pos = least(begin_pos, v_shard), updated_at = v_now
        where task_type = p_task_type;
        perform set_config('lock_timeout', v_lock_timeout, true);
        continue;
      end if;
      -- the counts per status leave with the shard (one scan of a closed shard, once)
      execute format('insert into asyncflow.status_deltas (task_type, in_pending, in_running, in_succeeded, in_failed, '
        'in_cancelled) select $1, -count(*) filter (where status = ''pending''), -count(*) filter (where status = '
        '''running''), -count(*) filter (where status = ''succeeded''), -count(*) filter (where status = ''failed''), '
        '-count(*) filter (where status = ''cancelled'') from asyncflow.%I', v_leaf) using p_task_type;
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
