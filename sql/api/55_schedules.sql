-- Periodic schedules: set, removed and listed here; their ticks are computed by the maintenance
-- scheduler (in Rust, with a cron library), which releases each due tick through
-- release_schedule_tick. The current text of each function: edit here, `asyncflow migrate`
-- applies it.
--
--   set_schedule(name, cron, spec)      creates or replaces; the cron's shape is checked here,
--                                       its fields by the entry points and the scheduler
--   scheduler pass (maintenance)        list_schedules -> due ticks -> release_schedule_tick each,
--                                       with note_schedule (next tick) in the same transaction, so
--                                       no reader sees a released tick still as the next one;
--                                       note_schedule alone when nothing is due (or why the cron
--                                       is unusable)
--   release_schedule_tick(name, tick)   insert (name, tick) into schedule_ticks: the unique key
--                                       makes the first caller create the task or run and every
--                                       other caller a no-op, in one transaction

-- schedule_json: the public form of a schedule.
create or replace function asyncflow.schedule_json(s asyncflow.schedules) returns jsonb
language sql stable as $$
  select jsonb_build_object('name', s.name, 'cron', s.cron, 'spec', s.spec, 'time_zone', s.time_zone,
    'missed', s.missed, 'max_catch_up', s.max_catch_up, 'paused', s.paused, 'since', s.since,
    'next_tick', case when not s.paused then s.next_tick end, 'last_tick', s.last_tick,
    'last_task_id', s.last_task_id, 'last_run_id', s.last_run_id, 'last_released_at', s.last_released_at,
    'error', s.error, 'created_at', s.created_at, 'updated_at', s.updated_at)
$$;

-- set_schedule: creates or replaces the schedule `name`. spec (a JSON object): type, context,
-- priority, queue_key, stage, or pipeline and input; time_zone (default UTC), missed (skip |
-- last | all, default skip), max_catch_up (1..1000, default 10), paused (default false).
-- Setting a schedule exactly as it is changes nothing; a new cron or time zone, or a resume,
-- releases only the ticks after that moment. Returns the schedule (schedule_json).
-- Locks: the schedule's row.
create or replace function asyncflow.set_schedule(name text, cron text, spec jsonb, p_now timestamptz default null)
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_name text := $1;
  v_cron text := btrim($2);
  v_spec jsonb;
  v_old asyncflow.schedules;
  v_new asyncflow.schedules;
  v_key text;
  v_tz text;
begin
  if v_name is null or v_name !~ '^[a-z][a-z0-9_.-]{0,63}$' then
    perform asyncflow.raise_error('AF006', format('schedule name must match ^[a-z][a-z0-9_.-]{0,63}$, got %s',
      coalesce(to_jsonb(v_name)::text, 'null')));
  end if;
  -- five or six fields (seconds first when six), or a nickname such as @hourly; the fields
  -- themselves are read by the cron library of the entry points and of the scheduler
  if v_cron is null or length(v_cron) > 200
    or v_cron !~ '^(@[A-Za-z]+|[0-9A-Za-z*/,?#-]+([ \t]+[0-9A-Za-z*/,?#-]+){4,5})$' then
    perform asyncflow.raise_error('AF006', format(
      'cron must have five fields (minute hour day-of-month month day-of-week), six with seconds first, or be a nickname such as @hourly, got %s',
      coalesce(to_jsonb($2)::text, 'null')));
  end if;
  if spec is null or jsonb_typeof(spec) <> 'object' then
    perform asyncflow.raise_error('AF006', 'spec must be a JSON object');
  end if;
  select k into v_key from jsonb_object_keys(spec) k
  where k not in ('type', 'context', 'priority', 'queue_key', 'stage', 'pipeline', 'input', 'time_zone', 'missed',
    'max_catch_up', 'paused') limit 1;
  if found then
    perform asyncflow.raise_error('AF006', format(
      'spec has unknown field %L (known: type, context, priority, queue_key, stage, pipeline, input, time_zone, missed, max_catch_up, paused)',
      v_key));
  end if;
  if (jsonb_typeof(spec -> 'type') = 'string') = (jsonb_typeof(spec -> 'pipeline') = 'string')
    or coalesce(jsonb_typeof(spec -> 'type'), 'string') <> 'string'
    or coalesce(jsonb_typeof(spec -> 'pipeline'), 'string') <> 'string' then
    perform asyncflow.raise_error('AF006', 'spec must name exactly one of type (a task type) and pipeline, as a string');
  end if;
  if spec ? 'type' then
    if exists (select 1 from jsonb_object_keys(spec) k where k = 'input') then
      perform asyncflow.raise_error('AF006', 'spec: input goes with pipeline; a task type takes context');
    end if;
    if not exists (select 1 from asyncflow.task_types t where t.task_type = spec ->> 'type') then
      perform asyncflow.check_type_name(spec ->> 'type');
      perform asyncflow.raise_error('AF001', format('unknown task type %L', spec ->> 'type'));
    end if;
    if jsonb_typeof(spec -> 'context') not in ('object', 'null') then
      perform asyncflow.raise_error('AF006', 'spec: context must be a JSON object');
    end if;
    perform asyncflow.check_json(spec -> 'context', 'context');
    if jsonb_typeof(spec -> 'priority') not in ('number', 'null') or (jsonb_typeof(spec -> 'priority') = 'number'
        and ((spec ->> 'priority')::numeric <> trunc((spec ->> 'priority')::numeric)
          or (spec ->> 'priority')::numeric not between 0 and 31104000)) then
      perform asyncflow.raise_error('AF004', format(
        'spec: priority must be an integer between 0 and 31104000 (seconds ahead), got %s', spec -> 'priority'));
    end if;
    if jsonb_typeof(spec -> 'queue_key') not in ('string', 'null') or length(spec ->> 'queue_key') not between 1 and 255 then
      perform asyncflow.raise_error('AF006', format('spec: queue_key must be a string of 1 to 255 characters, got %s',
        spec -> 'queue_key'));
    end if;
    if jsonb_typeof(spec -> 'stage') not in ('string', 'null') or (spec ->> 'stage') !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
      perform asyncflow.raise_error('AF006', format('spec: stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', spec -> 'stage'));
    end if;
  else
    if exists (select 1 from jsonb_object_keys(spec) k where k in ('context', 'priority', 'queue_key', 'stage')) then
      perform asyncflow.raise_error('AF006', 'spec: context, priority, queue_key and stage go with type; a pipeline takes input');
    end if;
    if not exists (select 1 from asyncflow.pipelines p where p.name = spec ->> 'pipeline') then
      perform asyncflow.raise_error('AF011', format('unknown pipeline %L', spec ->> 'pipeline'));
    end if;
    if jsonb_typeof(spec -> 'input') not in ('object', 'null') then
      perform asyncflow.raise_error('AF006', 'spec: input must be a JSON object');
    end if;
    perform asyncflow.check_json(spec -> 'input', 'input');
  end if;
  v_tz := coalesce(spec ->> 'time_zone', 'UTC');
  if jsonb_typeof(spec -> 'time_zone') not in ('string', 'null')
    or not exists (select 1 from pg_timezone_names z where z.name = v_tz) then
    perform asyncflow.raise_error('AF006', format('spec: time_zone must be an IANA time zone name such as Europe/Paris, got %s',
      spec -> 'time_zone'));
  end if;
  if jsonb_typeof(spec -> 'missed') not in ('string', 'null') or (spec ->> 'missed') not in ('skip', 'last', 'all') then
    perform asyncflow.raise_error('AF006', format('spec: missed must be skip, last or all, got %s', spec -> 'missed'));
  end if;
  if jsonb_typeof(spec -> 'max_catch_up') not in ('number', 'null') or (jsonb_typeof(spec -> 'max_catch_up') = 'number'
      and ((spec ->> 'max_catch_up')::numeric <> trunc((spec ->> 'max_catch_up')::numeric)
        or (spec ->> 'max_catch_up')::numeric not between 1 and 1000)) then
    perform asyncflow.raise_error('AF006', format('spec: max_catch_up must be an integer between 1 and 1000, got %s',
      spec -> 'max_catch_up'));
  end if;
  if jsonb_typeof(spec -> 'paused') not in ('boolean', 'null') then
    perform asyncflow.raise_error('AF006', format('spec: paused must be true or false, got %s', spec -> 'paused'));
  end if;

  -- every key present, so that two specs that mean the same are equal
  if spec ? 'type' then
    v_spec := jsonb_build_object('type', spec -> 'type',
      'context', coalesce(nullif(spec -> 'context', 'null'::jsonb), '{}'::jsonb),
      'priority', coalesce(nullif(spec -> 'priority', 'null'::jsonb), '0'::jsonb),
      'queue_key', coalesce(spec -> 'queue_key', 'null'::jsonb), 'stage', coalesce(spec -> 'stage', 'null'::jsonb));
  else
    v_spec := jsonb_build_object('pipeline', spec -> 'pipeline',
      'input', coalesce(nullif(spec -> 'input', 'null'::jsonb), '{}'::jsonb));
  end if;
  v_spec := v_spec || jsonb_build_object('time_zone', v_tz,
    'missed', coalesce(spec ->> 'missed', 'skip'),
    'max_catch_up', coalesce((spec ->> 'max_catch_up')::integer, 10),
    'paused', coalesce((spec ->> 'paused')::boolean, false));

  select * into v_old from asyncflow.schedules s where s.name = v_name for update;
  if found and v_old.cron = v_cron and v_old.spec = v_spec then
    return asyncflow.schedule_json(v_old);
  end if;
  insert into asyncflow.schedules as s (name, cron, time_zone, task_type, pipeline, spec, missed, max_catch_up, paused,
    since, created_at, updated_at)
  values (v_name, v_cron, v_tz, v_spec ->> 'type', v_spec ->> 'pipeline', v_spec, v_spec ->> 'missed',
    (v_spec ->> 'max_catch_up')::integer, (v_spec ->> 'paused')::boolean, v_now, v_now, v_now)
  on conflict on constraint schedules_pkey do update set
    cron = excluded.cron, time_zone = excluded.time_zone, task_type = excluded.task_type,
    pipeline = excluded.pipeline, spec = excluded.spec, missed = excluded.missed,
    max_catch_up = excluded.max_catch_up, paused = excluded.paused,
    -- a new cron or time zone, or a resume: no tick from before now
    since = case when s.cron <> excluded.cron or s.time_zone <> excluded.time_zone or (s.paused and not excluded.paused)
      then excluded.since else s.since end,
    next_tick = case when s.cron <> excluded.cron or s.time_zone <> excluded.time_zone then null else s.next_tick end,
    error = null, updated_at = excluded.updated_at
  returning * into v_new;
  return asyncflow.schedule_json(v_new);
end
$$;

-- pause_schedule: pauses (p_paused true) or resumes the schedule, its cron and spec unchanged
-- (set_schedule with paused changed). AF014 when there is no such schedule.
create or replace function asyncflow.pause_schedule(name text, p_paused boolean, p_now timestamptz default null)
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_s asyncflow.schedules;
begin
  select * into v_s from asyncflow.schedules s where s.name = $1;
  if not found then
    perform asyncflow.raise_error('AF014', format('unknown schedule %L', $1));
  end if;
  return asyncflow.set_schedule(v_s.name, v_s.cron,
    v_s.spec || jsonb_build_object('paused', coalesce(p_paused, true)), p_now);
end
$$;

-- remove_schedule: true when the schedule existed. Tasks and runs it released stay.
create or replace function asyncflow.remove_schedule(name text) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  delete from asyncflow.schedules s where s.name = $1;
  return found;
end
$$;

-- list_schedules: every schedule (schedule_json) by name, with its next tick (as of the
-- scheduler's last pass; null while paused or before the first pass), its last tick and the task
-- or run released for it.
create or replace function asyncflow.list_schedules() returns setof jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select asyncflow.schedule_json(s) from asyncflow.schedules s order by s.name
$$;

-- release_schedule_tick: releases the tick p_tick of schedule p_name, once: the first caller
-- inserts (p_name, p_tick) into schedule_ticks and creates the task (with its schedule and tick)
-- or starts the run, in the same transaction; any later or concurrent caller finds the key taken
-- and returns null. Null too when the schedule is gone, paused, or set again after p_tick.
-- Returns the task or run id. Locks: the (schedule, tick) key, then the schedule's row.
create or replace function asyncflow.release_schedule_tick(p_name text, p_tick timestamptz, p_now timestamptz default null)
returns text
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_s asyncflow.schedules;
  v_id text;
  v_key record;
begin
  select * into v_s from asyncflow.schedules s where s.name = p_name;
  if not found or v_s.paused or p_tick is null or p_tick <= v_s.since or p_tick > v_now then
    return null;
  end if;
  insert into asyncflow.schedule_ticks (schedule, tick, created_at) values (p_name, p_tick, v_now)
  on conflict do nothing;
  if not found then
    return null;
  end if;
  if v_s.task_type is not null then
    v_id := asyncflow.create_task_general(v_s.task_type, v_s.spec -> 'context', (v_s.spec ->> 'priority')::integer,
      null, v_s.spec ->> 'stage', null, null, p_now, v_s.spec ->> 'queue_key');
    select * into v_key from asyncflow.parse_task_id(v_id);
    update asyncflow.tasks t set schedule = p_name, tick = p_tick
    where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id;
    update asyncflow.schedule_ticks k set task_id = v_id where k.schedule = p_name and k.tick = p_tick;
  else
    v_id := asyncflow.start_run(v_s.pipeline, v_s.spec -> 'input', p_now => p_now);
    update asyncflow.runs r set schedule = p_name, tick = p_tick
    where r.day = asyncflow.run_day(v_id) and r.run_id = v_id;
    update asyncflow.schedule_ticks k set run_id = v_id where k.schedule = p_name and k.tick = p_tick;
  end if;
  update asyncflow.schedules s set
    last_tick = greatest(s.last_tick, p_tick),
    last_task_id = case when v_s.task_type is not null and p_tick >= coalesce(s.last_tick, p_tick) then v_id
      else s.last_task_id end,
    last_run_id = case when v_s.pipeline is not null and p_tick >= coalesce(s.last_tick, p_tick) then v_id
      else s.last_run_id end,
    last_released_at = v_now, error = null
  where s.name = p_name;
  return v_id;
end
$$;

-- note_schedule: what a scheduler pass found for the schedule: its next tick, or why it could
-- not use it (p_error, shown by list_schedules until the schedule works again or is set again).
-- Also prunes its released ticks more than a day behind its last tick.
create or replace function asyncflow.note_schedule(p_name text, p_next_tick timestamptz, p_error text) returns void
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  update asyncflow.schedules s set next_tick = p_next_tick, error = asyncflow.shorten(p_error)
  where s.name = p_name and (s.next_tick is distinct from p_next_tick or s.error is distinct from p_error);
  delete from asyncflow.schedule_ticks k
  where k.schedule = p_name
    and k.tick < (select s.last_tick - interval '1 day' from asyncflow.schedules s where s.name = p_name);
end
$$;

-- drop_expired_unique_keys (maintenance): removes up to p_limit uniqueness keys whose window
-- has ended (create_task's unique_for): such a key blocks nothing, so its row is dead weight.
-- Keys held while a task is pending or running (no window) are replaced when next used.
-- Also removes up to p_limit debounce keys (create_task's debounce_key) whose start passed a day
-- ago and whose task has been claimed or is gone: such a key names a task no create replaces.
-- Returns how many went.
create or replace function asyncflow.drop_expired_unique_keys(p_now timestamptz default null, p_limit integer default 10000)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_n integer;
  v_debounced integer;
begin
  delete from asyncflow.unique_keys k
  where (k.task_type, k.unique_key) in (
    select x.task_type, x.unique_key from asyncflow.unique_keys x
    where x.expires_at is not null and x.expires_at <= v_now
    order by x.expires_at limit greatest(coalesce(p_limit, 10000), 1)
    for update skip locked);
  get diagnostics v_n = row_count;
  delete from asyncflow.debounce_keys k
  where (k.task_type, k.debounce_key) in (
    select x.task_type, x.debounce_key from asyncflow.debounce_keys x
    where x.start_at <= v_now - interval '1 day'
      and not exists (select 1 from asyncflow.tasks t
        where t.task_type = x.task_type and t.shard = x.shard and t.id = x.id
          and t.status = 'pending' and t.claim_seq = 0)
    order by x.start_at limit greatest(coalesce(p_limit, 10000), 1)
    for update skip locked);
  get diagnostics v_debounced = row_count;
  return v_n + v_debounced;
end
$$;
