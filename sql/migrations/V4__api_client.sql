-- The client API: register_task_type, create_task(s), get_task, cancel_task, retry_task.
-- These are the public entry points (granted to asyncflow_client); tables stay private, so the
-- entry points are security definer with a fixed search_path.

-- Raises AF006 unless p_settings is an object of known settings with values in range.
create function asyncflow.check_settings(p_settings jsonb) returns void
language plpgsql immutable as $$
declare
  v_key text;
  v_val jsonb;
  v_spec record;
  v_num numeric;
begin
  if p_settings is null or jsonb_typeof(p_settings) <> 'object' then
    perform asyncflow.raise_error('AF006', 'settings must be a JSON object');
  end if;
  for v_key, v_val in select key, value from jsonb_each(p_settings) loop
    select * into v_spec from (values
      ('schedule_limit', 'int', 1::numeric, 10000::numeric),
      ('schedule_interval', 'number', 0.01, 86400),
      ('max_processing_time', 'int', 1, 31536000),
      ('max_retry_num', 'int', 0, 1000),
      ('max_retry_interval', 'int', -31536000, 31536000),
      ('shard_max_rows', 'int', 10, 1000000000000),
      ('retention', 'int', 0, 315360000),
      ('concurrency', 'int_or_null', 1, 1000000),
      ('initial_stage', 'stage', null, null),
      ('paused', 'bool', null, null)
    ) s(key, kind, lo, hi) where s.key = v_key;
    if not found then
      perform asyncflow.raise_error('AF006', format('unknown setting %L (known: schedule_limit, schedule_interval, '
        'max_processing_time, max_retry_num, max_retry_interval, shard_max_rows, retention, concurrency, '
        'initial_stage, paused)', v_key));
    end if;
    if v_spec.kind = 'int_or_null' and jsonb_typeof(v_val) = 'null' then
      continue;
    elsif v_spec.kind in ('int', 'int_or_null', 'number') then
      if jsonb_typeof(v_val) <> 'number' then
        perform asyncflow.raise_error('AF006', format('setting %s must be a number, got %s', v_key, v_val));
      end if;
      v_num := v_val::text::numeric;
      if (v_spec.kind <> 'number' and v_num <> trunc(v_num)) or v_num < v_spec.lo or v_num > v_spec.hi then
        perform asyncflow.raise_error('AF006', format('setting %s must be %s between %s and %s, got %s', v_key,
          case when v_spec.kind = 'number' then 'a number' else 'an integer' end, v_spec.lo, v_spec.hi, v_val));
      end if;
    elsif v_spec.kind = 'stage' then
      if jsonb_typeof(v_val) <> 'string' or v_val #>> '{}' !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
        perform asyncflow.raise_error('AF006', format('setting %s must be a stage name matching ^[A-Za-z0-9_.:/-]{1,64}$, got %s', v_key, v_val));
      end if;
    elsif v_spec.kind = 'bool' then
      if jsonb_typeof(v_val) <> 'boolean' then
        perform asyncflow.raise_error('AF006', format('setting %s must be true or false, got %s', v_key, v_val));
      end if;
    end if;
  end loop;
end
$$;

-- The public form of a task type's settings.
create function asyncflow.task_type_json(p asyncflow.task_types) returns jsonb
language sql stable as $$
  select jsonb_build_object(
    'task_type', p.task_type, 'schedule_limit', p.schedule_limit, 'schedule_interval', p.schedule_interval,
    'max_processing_time', p.max_processing_time, 'max_retry_num', p.max_retry_num,
    'max_retry_interval', p.max_retry_interval, 'shard_max_rows', p.shard_max_rows, 'retention', p.retention,
    'concurrency', p.concurrency, 'paused', p.paused, 'initial_stage', p.initial_stage,
    'created_at', p.created_at, 'updated_at', p.updated_at)
$$;

-- Creates the leaf table for one shard of a type and attaches it. The leaf is created on its own
-- and then attached: ATTACH takes SHARE UPDATE EXCLUSIVE on the parent, so inserts and claims of
-- the type go on meanwhile (CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE).
-- Identifiers are built only from a name that passed check_type_name, and quoted with %I.
create function asyncflow.create_shard(p_task_type text, p_shard integer, p_now timestamptz) returns void
language plpgsql as $$
declare
  v_leaf text := 'tasks_' || p_task_type || '_' || p_shard;
begin
  perform asyncflow.check_type_name(p_task_type);
  -- A queue shard churns: every task is updated at least twice and its old versions leave dead
  -- entries at the head of the ready index that claims must step over until VACUUM removes
  -- them. Autovacuum therefore visits a shard after 1 % of its rows changed (default 20 %), and
  -- analyzes it after 2 % (the claim's plan does not depend on statistics, see claim_tasks, but
  -- the other queries' do).
  execute format('create table asyncflow.%I (like asyncflow.tasks including defaults) with ('
    'autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, '
    'autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02)', v_leaf);
  execute format('alter table asyncflow.%I attach partition asyncflow.%I for values in (%L)',
    'tasks_' || p_task_type, v_leaf, p_shard);
  insert into asyncflow.shards (task_type, shard, created_at) values (p_task_type, p_shard, p_now);
end
$$;

-- register_task_type: creates the type (its partition set, first shard and id sequence) or
-- updates the settings named in p_settings, leaving the others as they are.
-- Locks: the task_types row; for a new type a transaction advisory lock on its name.
create function asyncflow.register_task_type(task_type text, settings jsonb default '{}')
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  p_task_type alias for $1;
  p_settings jsonb := coalesce($2, '{}');
  v_type asyncflow.task_types;
  v_now timestamptz := now();
begin
  perform asyncflow.check_type_name(p_task_type);
  perform asyncflow.check_settings(p_settings);
  perform 1 from asyncflow.task_types where task_type = p_task_type for update;
  if not found then
    perform pg_advisory_xact_lock(16711, hashtext(p_task_type));
    perform 1 from asyncflow.task_types where task_type = p_task_type for update;
  end if;
  if not found then
    -- DDL waits at most this long for a lock; the caller gets an error and can try again.
    perform set_config('lock_timeout', '5s', true);
    execute format('create sequence asyncflow.%I', 'tasks_' || p_task_type || '_id_seq');
    insert into asyncflow.task_types (task_type, id_seq, created_at, updated_at)
    values (p_task_type, ('asyncflow.' || quote_ident('tasks_' || p_task_type || '_id_seq'))::regclass, v_now, v_now);
    execute format('create table asyncflow.%I (like asyncflow.tasks including defaults) partition by list (shard)',
      'tasks_' || p_task_type);
    execute format('alter table asyncflow.%I add constraint %I primary key (id, shard)',
      'tasks_' || p_task_type, 'tasks_' || p_task_type || '_pkey');
    execute format('create index %I on asyncflow.%I (order_time) where status = ''pending''',
      'tasks_' || p_task_type || '_ready', 'tasks_' || p_task_type);
    execute format('create index %I on asyncflow.%I (lease_until) where status = ''running''',
      'tasks_' || p_task_type || '_running', 'tasks_' || p_task_type);
    execute format('alter table asyncflow.tasks attach partition asyncflow.%I for values in (%L)',
      'tasks_' || p_task_type, p_task_type);
    perform asyncflow.create_shard(p_task_type, 1, v_now);
    insert into asyncflow.positions (task_type, updated_at) values (p_task_type, v_now);
  end if;
  update asyncflow.task_types set
    schedule_limit = coalesce((p_settings ->> 'schedule_limit')::integer, schedule_limit),
    schedule_interval = coalesce((p_settings ->> 'schedule_interval')::double precision, schedule_interval),
    max_processing_time = coalesce((p_settings ->> 'max_processing_time')::integer, max_processing_time),
    max_retry_num = coalesce((p_settings ->> 'max_retry_num')::integer, max_retry_num),
    max_retry_interval = coalesce((p_settings ->> 'max_retry_interval')::integer, max_retry_interval),
    shard_max_rows = coalesce((p_settings ->> 'shard_max_rows')::bigint, shard_max_rows),
    retention = coalesce((p_settings ->> 'retention')::integer, retention),
    concurrency = case when p_settings ? 'concurrency' then (p_settings ->> 'concurrency')::integer else concurrency end,
    paused = coalesce((p_settings ->> 'paused')::boolean, paused),
    initial_stage = coalesce(p_settings ->> 'initial_stage', initial_stage),
    updated_at = v_now
  where task_type = p_task_type
  returning * into v_type;
  return asyncflow.task_type_json(v_type);
end
$$;

create function asyncflow.is_timestamptz(p_text text) returns boolean
language plpgsql stable as $$
begin
  return isfinite(p_text::timestamptz);
exception when others then
  return false;
end
$$;

-- The one insertion path (create_task and create_tasks both come here). Set-based: one INSERT for
-- the whole array, one NOTIFY for the call. Validates every element first; any bad element raises
-- and nothing is written.
create function asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamptz, p_single boolean)
returns text[]
language plpgsql as $$
declare
  v_type asyncflow.task_types;
  v_now timestamptz := coalesce(p_now, now());
  v_max_bytes integer;
  v_pos integer;
  v_bad record;
  v_ids text[];
  v_keys text[];
  v_found text;
  v_i integer;
begin
  select * into v_type from asyncflow.task_types where task_type = p_task_type;
  if not found then
    perform asyncflow.check_type_name(p_task_type);
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  if p_tasks is null or jsonb_typeof(p_tasks) <> 'array' then
    perform asyncflow.raise_error('AF006', 'tasks must be a JSON array of objects');
  end if;
  select max_context_bytes into v_max_bytes from asyncflow.config;

  select n, left(problem, 5) as code, substr(problem, 6) as why into v_bad from (
    select n, case
      when jsonb_typeof(e) <> 'object' then 'AF006must be a JSON object'
      when exists (select 1 from jsonb_object_keys(e) k
                   where k not in ('context', 'priority', 'run_at', 'stage', 'idempotency_key', 'user_id'))
        then 'AF006' || format('has unknown field %L (known: context, priority, run_at, stage, idempotency_key, user_id)',
          (select k from jsonb_object_keys(e) k
           where k not in ('context', 'priority', 'run_at', 'stage', 'idempotency_key', 'user_id') limit 1))
      when jsonb_typeof(e -> 'context') not in ('object', 'null') then 'AF006context must be a JSON object'
      when jsonb_typeof(e -> 'priority') not in ('number', 'null')
        or (jsonb_typeof(e -> 'priority') = 'number'
            and ((e ->> 'priority')::numeric <> trunc((e ->> 'priority')::numeric)
                 or (e ->> 'priority')::numeric not between 0 and 31104000))
        then 'AF004' || format('priority must be an integer between 0 and 31104000 (seconds ahead), got %s', e -> 'priority')
      when pg_column_size(e -> 'context') > v_max_bytes
        then 'AF005' || format('context is too large: %s bytes, the limit is %s (asyncflow.config.max_context_bytes)',
          pg_column_size(e -> 'context'), v_max_bytes)
      when jsonb_typeof(e -> 'run_at') not in ('string', 'null') or (jsonb_typeof(e -> 'run_at') = 'string'
        and not asyncflow.is_timestamptz(e ->> 'run_at'))
        then 'AF006' || format('run_at must be a finite timestamp, got %s', e -> 'run_at')
      when jsonb_typeof(e -> 'stage') not in ('string', 'null') or (e ->> 'stage') !~ '^[A-Za-z0-9_.:/-]{1,64}$'
        then 'AF006' || format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', e -> 'stage')
      when jsonb_typeof(e -> 'idempotency_key') not in ('string', 'null') or length(e ->> 'idempotency_key') not between 1 and 255
        then 'AF006' || format('idempotency_key must be a string of 1 to 255 characters, got %s', e -> 'idempotency_key')
      when jsonb_typeof(e -> 'user_id') not in ('string', 'null') or length(e ->> 'user_id') > 255
        then 'AF006' || format('user_id must be a string of at most 255 characters, got %s', e -> 'user_id')
    end as problem
    from jsonb_array_elements(p_tasks) with ordinality x(e, n)
  ) checked where problem is not null order by n limit 1;
  if found then
    perform asyncflow.raise_error(v_bad.code,
      case when p_single then v_bad.why else format('tasks[%s]: %s', v_bad.n - 1, v_bad.why) end);
  end if;

  -- An insert racing a roll may land in the shard just closed; begin_pos is recomputed on every
  -- maintenance pass (advance_begin_pos), so such a task is found again.
  select end_pos into v_pos from asyncflow.positions where task_type = p_task_type;

  with numbered as materialized (
    -- ids in input order
    select n, e, nextval(v_type.id_seq) as id
    from jsonb_array_elements(p_tasks) with ordinality x(e, n)
    order by n
  ), input as materialized (
    select n, e, id, e ->> 'idempotency_key' as ikey,
      row_number() over (partition by e ->> 'idempotency_key' order by n) as dup_rank,
      coalesce((e ->> 'priority')::integer, 0) as priority
    from numbered
  ), fresh_keys as (
    insert into asyncflow.idempotency_keys (task_type, idempotency_key, shard, id, created_at)
    select p_task_type, ikey, v_pos, id, v_now from input where ikey is not null and dup_rank = 1
    on conflict (task_type, idempotency_key) do nothing
    returning idempotency_key, id
  ), inserted as (
    insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
      max_retry_interval, order_time, user_id, idempotency_key, context, created_at, updated_at)
    select p_task_type, v_pos, i.id, coalesce(i.e ->> 'stage', v_type.initial_stage), 'pending', i.priority,
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce((i.e ->> 'run_at')::timestamptz, v_now) - make_interval(secs => i.priority),
      i.e ->> 'user_id', i.ikey, coalesce(nullif(i.e -> 'context', 'null'::jsonb), '{}'::jsonb), v_now, v_now
    from input i
    where i.ikey is null or i.id in (select id from fresh_keys)
    returning id
  )
  select array_agg(case
      when i.ikey is null or f.id is not null then asyncflow.format_task_id(p_task_type, v_pos, i.id)
      else (select asyncflow.format_task_id(p_task_type, k.shard, k.id) from asyncflow.idempotency_keys k
            where k.task_type = p_task_type and k.idempotency_key = i.ikey)
    end order by i.n),
    array_agg(i.ikey order by i.n)
  into v_ids, v_keys
  from input i
  left join fresh_keys f on f.id = i.id;

  -- A key repeated inside this call, or created by a transaction that committed while this
  -- statement waited on it, is not visible in the statement's snapshot: look again.
  if v_ids is not null and array_position(v_ids, null) is not null then
    for v_i in 1 .. array_length(v_ids, 1) loop
      if v_ids[v_i] is null then
        select asyncflow.format_task_id(p_task_type, k.shard, k.id) into v_found
        from asyncflow.idempotency_keys k where k.task_type = p_task_type and k.idempotency_key = v_keys[v_i];
        v_ids[v_i] := v_found;
        if v_found is null then
          raise exception using errcode = '40001',
            message = format('idempotency key %L is being created by a concurrent transaction; try again', v_keys[v_i]);
        end if;
      end if;
    end loop;
  end if;

  perform asyncflow.wake(p_task_type);
  return coalesce(v_ids, '{}');
end
$$;

-- create_tasks: bulk form; p_tasks is a JSON array of objects with the optional fields context,
-- priority, run_at, stage, idempotency_key, user_id. Returns the ids in input order.
create function asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamptz default null)
returns setof text
language sql security definer set search_path = pg_catalog, pg_temp as $$
  select unnest(asyncflow.insert_tasks(task_type, tasks, p_now, false))
$$;

-- create_task: one task; returns its id (the existing task's id when the idempotency key is known).
create function asyncflow.create_task(
  task_type text,
  context jsonb default '{}',
  priority integer default 0,
  run_at timestamptz default null,
  stage text default null,
  idempotency_key text default null,
  user_id text default null,
  p_now timestamptz default null
) returns text
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_task jsonb;
  v_type asyncflow.task_types;
  v_now timestamptz := coalesce(p_now, now());
  v_pos integer;
  v_id bigint;
  v_max_bytes integer;
begin
  -- The common case (no idempotency key) takes a direct path: the same checks and errors as
  -- insert_tasks, then one INSERT ... VALUES; about four times the rate of the general path.
  if idempotency_key is null then
    select * into v_type from asyncflow.task_types y where y.task_type = create_task.task_type;
    if not found then
      perform asyncflow.check_type_name(create_task.task_type);
      perform asyncflow.raise_error('AF001', format('unknown task type %L', create_task.task_type));
    end if;
    select max_context_bytes into v_max_bytes from asyncflow.config;
    if context is not null and jsonb_typeof(context) not in ('object', 'null') then
      perform asyncflow.raise_error('AF006', 'context must be a JSON object');
    elsif priority is not null and priority not between 0 and 31104000 then
      perform asyncflow.raise_error('AF004',
        format('priority must be an integer between 0 and 31104000 (seconds ahead), got %s', priority));
    elsif pg_column_size(context) > v_max_bytes then
      perform asyncflow.raise_error('AF005', format(
        'context is too large: %s bytes, the limit is %s (asyncflow.config.max_context_bytes)',
        pg_column_size(context), v_max_bytes));
    elsif run_at is not null and not isfinite(run_at) then
      perform asyncflow.raise_error('AF006', format('run_at must be a finite timestamp, got %s', run_at));
    elsif stage is not null and stage !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
      perform asyncflow.raise_error('AF006', format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', to_jsonb(stage)));
    elsif length(user_id) > 255 then
      perform asyncflow.raise_error('AF006',
        format('user_id must be a string of at most 255 characters, got %s', to_jsonb(user_id)));
    end if;
    select end_pos into v_pos from asyncflow.positions p where p.task_type = create_task.task_type;
    v_id := nextval(v_type.id_seq);
    insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
      max_retry_interval, order_time, user_id, context, created_at, updated_at)
    values (create_task.task_type, v_pos, v_id, coalesce(stage, v_type.initial_stage), 'pending', coalesce(priority, 0),
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce(run_at, v_now) - make_interval(secs => coalesce(priority, 0)),
      user_id, coalesce(nullif(context, 'null'::jsonb), '{}'::jsonb), v_now, v_now);
    perform asyncflow.wake(create_task.task_type);
    return asyncflow.format_task_id(create_task.task_type, v_pos, v_id);
  end if;

  v_task := jsonb_build_object('context', coalesce(context, '{}'::jsonb), 'priority', coalesce(priority, 0));
  if run_at is not null then v_task := v_task || jsonb_build_object('run_at', run_at); end if;
  if stage is not null then v_task := v_task || jsonb_build_object('stage', stage); end if;
  if idempotency_key is not null then v_task := v_task || jsonb_build_object('idempotency_key', idempotency_key); end if;
  if user_id is not null then v_task := v_task || jsonb_build_object('user_id', user_id); end if;
  return (asyncflow.insert_tasks(task_type, jsonb_build_array(v_task), p_now, true))[1];
end
$$;

-- The public form of a task.
create function asyncflow.task_json(t asyncflow.tasks) returns jsonb
language sql stable as $$
  select jsonb_build_object(
    'id', asyncflow.format_task_id(t.task_type, t.shard, t.id), 'type', t.task_type, 'stage', t.stage,
    'status', t.status, 'priority', t.priority, 'attempt', t.attempt, 'retry_count', t.retry_count,
    'max_retry_num', t.max_retry_num, 'max_retry_interval', t.max_retry_interval, 'claim_seq', t.claim_seq,
    'owner', t.owner, 'lease_until', t.lease_until, 'order_time', t.order_time, 'user_id', t.user_id,
    'idempotency_key', t.idempotency_key, 'context', t.context, 'result', t.result, 'error', t.last_error,
    'schedule_log', t.schedule_log, 'created_at', t.created_at, 'updated_at', t.updated_at,
    'finished_at', t.finished_at)
$$;

-- get_task: the task as JSON, or null when there is none (also for text that is not a task id).
create function asyncflow.get_task(task_id text) returns jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  p_task_id alias for $1;
  v_key record;
  v_task asyncflow.tasks;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    return null;
  end if;
  select * into v_task from asyncflow.tasks
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id;
  if not found then
    return null;
  end if;
  return asyncflow.task_json(v_task);
end
$$;

-- Raises AF007 unless the task exists.
create function asyncflow.check_task_exists(p_task_type text, p_shard integer, p_id bigint, p_task_id text) returns void
language plpgsql stable as $$
begin
  perform 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and id = p_id;
  if not found then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
end
$$;

-- cancel_task: a pending or running task becomes cancelled (a running task's worker then has its
-- report refused). Returns true when cancelled, false when the task had already ended.
create function asyncflow.cancel_task(task_id text, p_now timestamptz default null) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  p_task_id alias for $1;
  v_key record;
  v_now timestamptz := coalesce(p_now, now());
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
  update asyncflow.tasks set status = 'cancelled', owner = null, lease_until = null, finished_at = v_now,
    updated_at = v_now,
    schedule_log = asyncflow.append_log(schedule_log, jsonb_build_object('event', 'cancelled', 'at', v_now))
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id and status in ('pending', 'running');
  if found then
    return true;
  end if;
  perform asyncflow.check_task_exists(v_key.task_type, v_key.shard, v_key.id, p_task_id);
  return false;
end
$$;

-- retry_task: a failed or cancelled task is queued again at its current stage with a fresh set of
-- tries (order_time = now - priority). Returns true when queued, false when the task was not failed
-- or cancelled. Moves begin_pos back when the task's shard is below it.
create function asyncflow.retry_task(task_id text, p_now timestamptz default null) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  p_task_id alias for $1;
  v_key record;
  v_now timestamptz := coalesce(p_now, now());
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
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
