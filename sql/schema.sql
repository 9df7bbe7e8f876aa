-- Snapshot of the schema after every migration (generated; never executed).
-- Regenerate: UPDATE_SCHEMA=1 cargo test --test schema_snapshot
-- Dumped by pg_dump from PostgreSQL 15.

CREATE SCHEMA asyncflow;

CREATE TYPE asyncflow.claimed_task AS (
	task_id text,
	task_type text,
	stage text,
	context jsonb,
	priority integer,
	attempt integer,
	claim_seq integer,
	user_id text,
	lease_until timestamp with time zone,
	claimed_at timestamp with time zone
);

CREATE TYPE asyncflow.task_status AS ENUM (
    'pending',
    'running',
    'succeeded',
    'failed',
    'cancelled'
);

CREATE FUNCTION asyncflow.advance_begin_pos(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_pos asyncflow.positions;
  v_shard integer;
  v_begin integer;
begin
  select * into v_pos from asyncflow.positions where task_type = p_task_type for update;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  v_begin := v_pos.end_pos;
  for v_shard in
    select shard from asyncflow.shards
    where task_type = p_task_type and dropped_at is null and shard < v_pos.end_pos order by shard
  loop
    if asyncflow.shard_is_live(p_task_type, v_shard) then
      v_begin := v_shard;
      exit;
    end if;
  end loop;
  update asyncflow.shards set closed_at = v_now
  where task_type = p_task_type and shard < v_begin and closed_at is null and dropped_at is null;
  update asyncflow.shards set closed_at = null
  where task_type = p_task_type and shard >= v_begin and closed_at is not null;
  if v_begin <> v_pos.begin_pos then
    update asyncflow.positions set begin_pos = v_begin, updated_at = v_now where task_type = p_task_type;
  end if;
  return v_begin;
end
$$;

CREATE FUNCTION asyncflow.append_log(p_log jsonb, p_entry jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  -- each argument appears once (p_log is a column, cheap to repeat): otherwise the planner
  -- refuses to inline a call whose argument is an expression
  select case when jsonb_array_length(p_log) < 20 then p_log
    else jsonb_path_query_array(p_log, '$[last - 18 to last]') end || jsonb_build_array(p_entry)
$_$;

CREATE FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.check_settings(p_settings jsonb) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.check_task_exists(p_task_type text, p_shard integer, p_id bigint, p_task_id text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
begin
  perform 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and id = p_id;
  if not found then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
end
$$;

CREATE FUNCTION asyncflow.check_type_name(p_task_type text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
begin
  if p_task_type is null or p_task_type !~ '^[a-z][a-z0-9_]{0,39}$' then
    perform asyncflow.raise_error('AF003', format(
      'invalid task type name %s: it must match ^[a-z][a-z0-9_]{0,39}$', coalesce(quote_literal(p_task_type), 'null')));
  end if;
end
$_$;

CREATE FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF asyncflow.claimed_task
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    SET jit TO 'off'
    AS $$
declare
  v_type asyncflow.task_types;
  v_now timestamptz := coalesce(p_now, now());
  v_limit integer;
  v_begin integer;
  v_running bigint;
  v_claimed bigint;
begin
  if p_owner is null or length(p_owner) not between 1 and 200 then
    perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
  end if;
  select * into v_type from asyncflow.task_types where task_type = p_task_type;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  if v_type.paused or coalesce(p_limit, 0) <= 0 then
    return;
  end if;
  v_limit := least(p_limit, v_type.schedule_limit);
  if v_type.concurrency is not null then
    perform 1 from asyncflow.task_types where task_type = p_task_type for update;
    select count(*) into v_running from asyncflow.tasks where task_type = p_task_type and status = 'running';
    v_limit := least(v_limit, v_type.concurrency - v_running);
    if v_limit <= 0 then
      return;
    end if;
  end if;
  select begin_pos into v_begin from asyncflow.positions where task_type = p_task_type;
  -- A claim need not wait for its WAL flush: a claim lost in a server crash leaves the task
  -- pending, the worker's report is then refused by the fence, and the task runs again (what a
  -- crash means anyway: at least once). This takes an fsync off the wake-to-start path. Applies
  -- to the rest of the calling transaction (normally just this call, in autocommit).
  perform set_config('synchronous_commit', 'off', true);

  return query
  with picked as (
    select shard, id from asyncflow.tasks
    where task_type = p_task_type and shard >= v_begin and status = 'pending' and order_time <= v_now
    order by order_time
    limit v_limit
    for update skip locked
  )
  update asyncflow.tasks t set
    status = 'running', owner = p_owner, attempt = t.attempt + 1, claim_seq = t.claim_seq + 1,
    claimed_at = v_now, lease_until = v_now + make_interval(secs => v_type.max_processing_time), updated_at = v_now
  from picked
  where t.task_type = p_task_type and t.shard = picked.shard and t.id = picked.id
  returning asyncflow.format_task_id(t.task_type, t.shard, t.id), t.task_type, t.stage, t.context, t.priority,
    t.attempt, t.claim_seq, t.user_id, t.lease_until, t.claimed_at;
  get diagnostics v_claimed = row_count;
  if v_claimed > 0 then
    insert into asyncflow.type_counters as k (task_type, slot, claimed)
    values (p_task_type, pg_backend_pid() % 16, v_claimed)
    on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed;
  end if;
end
$$;

CREATE FUNCTION asyncflow.create_shard(p_task_type text, p_shard integer, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION asyncflow.create_task(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF text
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select unnest(asyncflow.insert_tasks(task_type, tasks, p_now, false))
$$;

CREATE FUNCTION asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF integer
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
    select s.shard from asyncflow.shards s
    join asyncflow.positions p on p.task_type = s.task_type
    join asyncflow.task_types y on y.task_type = s.task_type
    where s.task_type = p_task_type and s.dropped_at is null and s.shard < p.begin_pos
      and s.closed_at <= v_now - make_interval(secs => y.retention)
    order by s.shard
  loop
    v_leaf := 'tasks_' || p_task_type || '_' || v_shard;
    begin
      perform set_config('lock_timeout', '1s', true);
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
    exception when lock_not_available then
      perform set_config('lock_timeout', v_lock_timeout, true);
      continue;
    end;
    delete from asyncflow.idempotency_keys where task_type = p_task_type and shard = v_shard;
    update asyncflow.shards set dropped_at = v_now where task_type = p_task_type and shard = v_shard;
    return next v_shard;
  end loop;
end
$$;

CREATE FUNCTION asyncflow.format_task_id(p_task_type text, p_shard integer, p_id bigint) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select p_task_type || '-' || p_shard::text || '-' || p_id::text
$$;

CREATE FUNCTION asyncflow.get_task(task_id text) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamp with time zone, p_single boolean) RETURNS text[]
    LANGUAGE plpgsql
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.is_timestamptz(p_text text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
begin
  return isfinite(p_text::timestamptz);
exception when others then
  return false;
end
$$;

CREATE FUNCTION asyncflow.list_tasks(p_task_type text DEFAULT NULL::text, p_status asyncflow.task_status DEFAULT NULL::asyncflow.task_status, p_stage text DEFAULT NULL::text, p_user_id text DEFAULT NULL::text, p_after text DEFAULT NULL::text, p_limit integer DEFAULT 100) RETURNS SETOF jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_after record;
  v_after_type text;
  v_after_id bigint;
begin
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', 'limit must be between 1 and 1000');
  end if;
  if p_after is not null then
    select * into v_after from asyncflow.parse_task_id(p_after);
    if v_after.task_type is null then
      perform asyncflow.raise_error('AF006', format('after must be a task id, got %L', p_after));
    end if;
    v_after_type := v_after.task_type;
    v_after_id := v_after.id;
  end if;
  return query
  select asyncflow.task_json(t) from asyncflow.tasks t
  where (p_task_type is null or t.task_type = p_task_type)
    and (p_status is null or t.status = p_status)
    and (p_stage is null or t.stage = p_stage)
    and (p_user_id is null or t.user_id = p_user_id)
    and (v_after_type is null or (t.task_type, t.id) > (v_after_type, v_after_id))
  order by t.task_type, t.id
  limit p_limit;
end
$$;

CREATE FUNCTION asyncflow.next_due(p_task_type text) RETURNS timestamp with time zone
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select min(order_time) from asyncflow.tasks
  where task_type = p_task_type and status = 'pending'
    and shard >= (select begin_pos from asyncflow.positions where task_type = p_task_type)
$$;

CREATE FUNCTION asyncflow.parse_task_id(p_task_id text, OUT task_type text, OUT shard integer, OUT id bigint) RETURNS record
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  select split_part(p_task_id, '-', 1), split_part(p_task_id, '-', 2)::integer, split_part(p_task_id, '-', 3)::bigint
  where p_task_id ~ '^[a-z][a-z0-9_]{0,39}-[1-9][0-9]{0,8}-[1-9][0-9]{0,17}$'
$_$;

CREATE FUNCTION asyncflow.raise_error(p_code text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  raise exception using errcode = p_code, message = p_message;
end
$$;

CREATE FUNCTION asyncflow.register_task_type(task_type text, settings jsonb DEFAULT '{}'::jsonb) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $_$
#variable_conflict use_column
declare
  v_now timestamptz := coalesce(p_now, now());
  v_bad record;
  v_max_bytes integer;
begin
  if p_reports is null or jsonb_typeof(p_reports) <> 'array' then
    perform asyncflow.raise_error('AF006', 'reports must be a JSON array of objects');
  end if;
  select max_context_bytes into v_max_bytes from asyncflow.config;
  select n, problem into v_bad from (
    select n, case
      when jsonb_typeof(e) <> 'object' then 'must be a JSON object'
      when jsonb_typeof(e -> 'task_id') is distinct from 'string' then 'task_id must be a string'
      -- the same rule as parse_task_id, written as an unbounded pattern plus lengths (several
      -- times cheaper per row than bounded repetitions)
      when (e ->> 'task_id') !~ '^[a-z][a-z0-9_]*-[1-9][0-9]*-[1-9][0-9]*$'
        or length(split_part(e ->> 'task_id', '-', 1)) > 40 or length(split_part(e ->> 'task_id', '-', 2)) > 9
        or length(split_part(e ->> 'task_id', '-', 3)) > 18
        then format('task_id must be a task id (<type>-<shard>-<n>), got %s', e -> 'task_id')
      when jsonb_typeof(e -> 'claim_seq') is distinct from 'number' or (e ->> 'claim_seq') !~ '^-?[0-9]{1,9}$'
        then format('claim_seq must be an integer, got %s', e -> 'claim_seq')
      when e ->> 'outcome' is null or e ->> 'outcome' not in ('advance', 'succeed', 'fail', 'later', 'release', 'heartbeat')
        then format('outcome must be one of advance, succeed, fail, later, release, heartbeat, got %s', e -> 'outcome')
      when e ->> 'outcome' = 'advance' and coalesce(e ->> 'stage', '') !~ '^[A-Za-z0-9_.:/-]{1,64}$'
        then format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', e -> 'stage')
      when e ->> 'outcome' in ('advance', 'later') and jsonb_typeof(e -> 'context') not in ('object', 'null')
        then 'context must be a JSON object'
      when pg_column_size(e -> 'context') > v_max_bytes
        then format('context is too large: %s bytes, the limit is %s', pg_column_size(e -> 'context'), v_max_bytes)
      when pg_column_size(e -> 'result') > v_max_bytes
        then format('result is too large: %s bytes, the limit is %s', pg_column_size(e -> 'result'), v_max_bytes)
      when jsonb_typeof(e -> 'delay') not in ('number', 'null') then 'delay must be a number of seconds'
      when jsonb_typeof(e -> 'error') not in ('string', 'null') then 'error must be a string'
      when jsonb_typeof(e -> 'stage') not in ('string', 'null') then 'stage must be a string'
      when e ->> 'outcome' = 'later' and (jsonb_typeof(e -> 'delay') is distinct from 'number'
        or (e ->> 'delay')::numeric not between 0 and 31536000)
        then format('delay must be a number of seconds between 0 and 31536000, got %s', e -> 'delay')
      when jsonb_typeof(e -> 'retry') not in ('boolean', 'null') then 'retry must be true or false'
    end as problem
    from jsonb_array_elements(p_reports) with ordinality x(e, n)
  ) checked where problem is not null order by n limit 1;
  if found then
    perform asyncflow.raise_error('AF006', format('reports[%s]: %s', v_bad.n - 1, v_bad.problem));
  end if;

  return query
  with r as (
    -- one pass of jsonb_to_recordset (typed, in C) over the validated reports; ids are split
    -- inline (a lateral call to parse_task_id is not inlined and cost more than the update)
    select x.n, x.task_id, split_part(x.task_id, '-', 1) as task_type,
      split_part(x.task_id, '-', 2)::integer as shard, split_part(x.task_id, '-', 3)::bigint as id,
      x.claim_seq, x.outcome, x.stage, nullif(x.context, 'null'::jsonb) as context, x.result,
      left(x.error, 256) as error, coalesce(x.retry, true) as retry, x.delay
    from rows from (jsonb_to_recordset(p_reports) as (task_id text, claim_seq integer, outcome text, stage text,
      context jsonb, result jsonb, error text, retry boolean, delay double precision))
      with ordinality as x(task_id, claim_seq, outcome, stage, context, result, error, retry, delay, n)
  ), changed as (
    update asyncflow.tasks t set
      status = case
        when r.outcome = 'succeed' then 'succeeded'
        when r.outcome = 'heartbeat' then 'running'
        when r.outcome = 'fail' and (not r.retry or t.attempt > t.max_retry_num) then 'failed'
        else 'pending' end::asyncflow.task_status,
      stage = case when r.outcome = 'advance' then r.stage else t.stage end,
      context = case when r.outcome in ('advance', 'later') then coalesce(r.context, t.context) else t.context end,
      result = case when r.outcome = 'succeed' then coalesce(r.result, '{}'::jsonb) else t.result end,
      last_error = case when r.outcome = 'fail' then coalesce(r.error, 'failed') else t.last_error end,
      attempt = case
        when r.outcome = 'advance' then 0
        when r.outcome in ('later', 'release') then greatest(t.attempt - 1, 0)
        else t.attempt end,
      retry_count = case when r.outcome = 'fail' then t.retry_count + 1 else t.retry_count end,
      order_time = case
        when r.outcome = 'advance' then v_now - make_interval(secs => t.priority)
        when r.outcome = 'fail' then v_now + asyncflow.retry_backoff(t.attempt, t.max_retry_interval)
        when r.outcome = 'later' then v_now + make_interval(secs => r.delay)
        else t.order_time end,
      owner = case when r.outcome = 'heartbeat' then t.owner end,
      lease_until = case when r.outcome = 'heartbeat'
        then v_now + make_interval(secs => (select max_processing_time from asyncflow.task_types y where y.task_type = t.task_type)) end,
      finished_at = case
        when r.outcome = 'succeed' or (r.outcome = 'fail' and (not r.retry or t.attempt > t.max_retry_num)) then v_now
        else t.finished_at end,
      -- the entry is built as cheaply as jsonb allows (a third of the report's cost was here):
      -- date_part in double precision rather than numeric extract, and the error key added only
      -- to failures instead of stripping nulls from every entry
      schedule_log = case when r.outcome = 'heartbeat' then t.schedule_log
        else asyncflow.append_log(t.schedule_log, case when r.outcome = 'fail'
          then jsonb_build_object('worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
            'cost_ms', floor(date_part('epoch', v_now - t.claimed_at) * 1000)::bigint, 'outcome', r.outcome,
            'error', coalesce(r.error, 'failed'))
          else jsonb_build_object('worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
            'cost_ms', floor(date_part('epoch', v_now - t.claimed_at) * 1000)::bigint, 'outcome', r.outcome) end) end,
      updated_at = v_now
    -- a task named twice in one batch: its last report wins, the earlier ones are refused
    from (select distinct on (task_type, shard, id) * from r order by task_type, shard, id, n desc) r
    where t.task_type = r.task_type and t.shard = r.shard and t.id = r.id
      -- status compared as text: the partial index on running tasks must not look like a way
      -- in (the planner would walk every running task for each report)
      and t.status::text = 'running' and t.owner = p_owner and t.claim_seq = r.claim_seq
    returning r.n, t.status, t.lease_until, t.task_type, r.outcome, t.schedule_log -> -1 as entry
  ), counted as (
    insert into asyncflow.type_counters as k (task_type, slot, succeeded, failed, retried)
    select c.task_type, pg_backend_pid() % 16, count(*) filter (where c.status = 'succeeded'),
      count(*) filter (where c.status = 'failed'), count(*) filter (where c.outcome = 'fail' and c.status = 'pending')
    from changed c where c.outcome in ('succeed', 'fail') group by c.task_type
    on conflict (task_type, slot) do update set succeeded = k.succeeded + excluded.succeeded,
      failed = k.failed + excluded.failed, retried = k.retried + excluded.retried
  ), durations as (
    -- k: how many bounds lie below the duration (its bucket, 0 .. cardinality(bounds))
    select c.task_type, c.entry ->> 'stage' as stage, d.secs,
      (select count(*) from unnest(asyncflow.stage_time_bounds()) b where b < d.secs)::integer as k
    from changed c cross join lateral (select (c.entry ->> 'cost_ms')::double precision / 1000 as secs) d
    where c.outcome not in ('heartbeat', 'release')
  ), per_bucket as (
    select task_type, stage, k, count(*) as n, sum(secs) as secs from durations group by task_type, stage, k
  ), timed as (
    insert into asyncflow.stage_times as s (task_type, stage, slot, calls, seconds, buckets)
    select t.task_type, t.stage, pg_backend_pid() % 16, sum(coalesce(g.n, 0)), sum(coalesce(g.secs, 0)),
      array_agg(coalesce(g.n, 0) order by x.k)
    from (select distinct task_type, stage from per_bucket) t
    cross join generate_series(0, cardinality(asyncflow.stage_time_bounds())) x(k)
    left join per_bucket g on g.task_type = t.task_type and g.stage = t.stage and g.k = x.k
    group by t.task_type, t.stage
    on conflict (task_type, stage, slot) do update set calls = s.calls + excluded.calls,
      seconds = s.seconds + excluded.seconds,
      buckets = array(select a + b from unnest(s.buckets, excluded.buckets) with ordinality u(a, b, i) order by i)
  )
  select r.task_id, c.n is not null,
    -- the current status is looked up only for refused reports
    case when c.n is null then (select s.status from asyncflow.tasks s
      where s.task_type = r.task_type and s.shard = r.shard and s.id = r.id) else c.status end,
    c.lease_until
  from r
  left join changed c on c.n = r.n
  order by r.n;

  -- Tasks that went back to pending are ready for any worker of the type (one NOTIFY per type).
  perform asyncflow.wake(y.task_type)
  from (select distinct split_part(e ->> 'task_id', '-', 1) as task_type
        from jsonb_array_elements(p_reports) e
        where e ->> 'outcome' in ('advance', 'release', 'fail', 'later')) y;
end
$_$;

CREATE FUNCTION asyncflow.rescue_expired(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 1000) RETURNS TABLE(task_id text, task_type text, status asyncflow.task_status)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
  v_now timestamptz := coalesce(p_now, now());
  v_ids text[];
  v_types text[];
  v_statuses asyncflow.task_status[];
begin
  with expired as (
    select task_type, shard, id from asyncflow.tasks
    where status = 'running' and lease_until < v_now
    limit p_limit
    for update skip locked
  ), changed as (
    update asyncflow.tasks t set
      status = case when t.attempt > t.max_retry_num then 'failed' else 'pending' end::asyncflow.task_status,
      order_time = case when t.attempt > t.max_retry_num then t.order_time
        else v_now + asyncflow.retry_backoff(t.attempt, t.max_retry_interval) end,
      retry_count = t.retry_count + 1,
      last_error = format('lease expired: no report from worker %s by %s', t.owner, t.lease_until),
      finished_at = case when t.attempt > t.max_retry_num then v_now end,
      schedule_log = asyncflow.append_log(t.schedule_log, jsonb_build_object(
        'worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
        'cost_ms', round(extract(epoch from (v_now - t.claimed_at)) * 1000), 'outcome', 'rescued',
        'error', format('lease expired at %s', t.lease_until))),
      owner = null, lease_until = null, updated_at = v_now
    from expired e
    where t.task_type = e.task_type and t.shard = e.shard and t.id = e.id
    returning asyncflow.format_task_id(t.task_type, t.shard, t.id) as task_id, t.task_type, t.status
  )
  select array_agg(c.task_id), array_agg(c.task_type), array_agg(c.status)
  into v_ids, v_types, v_statuses
  from changed c;

  insert into asyncflow.type_counters as k (task_type, slot, rescued, failed)
  select u.type_name, pg_backend_pid() % 16, count(*), count(*) filter (where u.st = 'failed')
  from unnest(v_types, v_statuses) u(type_name, st) group by u.type_name
  on conflict (task_type, slot) do update set rescued = k.rescued + excluded.rescued, failed = k.failed + excluded.failed;

  perform asyncflow.wake(d.type_name)
  from (select distinct u.type_name from unnest(v_types, v_statuses) u(type_name, st) where u.st = 'pending') d;
  return query select * from unnest(v_ids, v_types, v_statuses);
end
$$;

CREATE FUNCTION asyncflow.retry_backoff(p_attempt integer, p_max integer) RETURNS interval
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select make_interval(secs => case
    when p_max > 0 then least(power(2::double precision, least(greatest(p_attempt, 1) - 1, 40)), p_max::double precision)
    when p_max < 0 then abs(p_max)::double precision
    else 0 end)
$$;

CREATE FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
$_$;

CREATE FUNCTION asyncflow.roll_shard(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
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
  select end_pos into v_end from asyncflow.positions where task_type = p_task_type for update;
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

CREATE FUNCTION asyncflow.shard_is_live(p_task_type text, p_shard integer) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
  select exists (select 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and status = 'pending')
      or exists (select 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and status = 'running')
$$;

CREATE FUNCTION asyncflow.stage_time_bounds() RETURNS double precision[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select '{0.005,0.01,0.05,0.1,0.5,1,5,30,60,300,1800,3600,21600}'::double precision[]
$$;

CREATE TABLE asyncflow.tasks (
    task_type text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    stage text NOT NULL,
    status asyncflow.task_status DEFAULT 'pending'::asyncflow.task_status NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    retry_count integer DEFAULT 0 NOT NULL,
    max_retry_num integer NOT NULL,
    max_retry_interval integer NOT NULL,
    claim_seq integer DEFAULT 0 NOT NULL,
    owner text,
    claimed_at timestamp with time zone,
    lease_until timestamp with time zone,
    order_time timestamp with time zone NOT NULL,
    queue_key text,
    user_id text,
    idempotency_key text,
    context jsonb DEFAULT '{}'::jsonb NOT NULL,
    result jsonb,
    last_error text,
    schedule_log jsonb DEFAULT '[]'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone
)
PARTITION BY LIST (task_type);

CREATE FUNCTION asyncflow.task_json(t asyncflow.tasks) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select jsonb_build_object(
    'id', asyncflow.format_task_id(t.task_type, t.shard, t.id), 'type', t.task_type, 'stage', t.stage,
    'status', t.status, 'priority', t.priority, 'attempt', t.attempt, 'retry_count', t.retry_count,
    'max_retry_num', t.max_retry_num, 'max_retry_interval', t.max_retry_interval, 'claim_seq', t.claim_seq,
    'owner', t.owner, 'lease_until', t.lease_until, 'order_time', t.order_time, 'user_id', t.user_id,
    'idempotency_key', t.idempotency_key, 'context', t.context, 'result', t.result, 'error', t.last_error,
    'schedule_log', t.schedule_log, 'created_at', t.created_at, 'updated_at', t.updated_at,
    'finished_at', t.finished_at)
$$;

CREATE TABLE asyncflow.task_types (
    task_type text NOT NULL,
    schedule_limit integer DEFAULT 100 NOT NULL,
    schedule_interval double precision DEFAULT 5 NOT NULL,
    max_processing_time integer DEFAULT 300 NOT NULL,
    max_retry_num integer DEFAULT 3 NOT NULL,
    max_retry_interval integer DEFAULT 60 NOT NULL,
    shard_max_rows bigint DEFAULT 5000000 NOT NULL,
    retention integer DEFAULT 604800 NOT NULL,
    concurrency integer,
    paused boolean DEFAULT false NOT NULL,
    initial_stage text DEFAULT 'start'::text NOT NULL,
    id_seq regclass NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT task_types_concurrency_check CHECK (((concurrency >= 1) AND (concurrency <= 1000000))),
    CONSTRAINT task_types_initial_stage_check CHECK ((initial_stage ~ '^[A-Za-z0-9_.:/-]{1,64}$'::text)),
    CONSTRAINT task_types_max_processing_time_check CHECK (((max_processing_time >= 1) AND (max_processing_time <= 31536000))),
    CONSTRAINT task_types_max_retry_interval_check CHECK (((max_retry_interval >= '-31536000'::integer) AND (max_retry_interval <= 31536000))),
    CONSTRAINT task_types_max_retry_num_check CHECK (((max_retry_num >= 0) AND (max_retry_num <= 1000))),
    CONSTRAINT task_types_name_check CHECK ((task_type ~ '^[a-z][a-z0-9_]{0,39}$'::text)),
    CONSTRAINT task_types_retention_check CHECK (((retention >= 0) AND (retention <= 315360000))),
    CONSTRAINT task_types_schedule_interval_check CHECK (((schedule_interval >= (0.01)::double precision) AND (schedule_interval <= (86400)::double precision))),
    CONSTRAINT task_types_schedule_limit_check CHECK (((schedule_limit >= 1) AND (schedule_limit <= 10000))),
    CONSTRAINT task_types_shard_max_rows_check CHECK (((shard_max_rows >= 10) AND (shard_max_rows <= '1000000000000'::bigint)))
);

CREATE FUNCTION asyncflow.task_type_json(p asyncflow.task_types) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  select jsonb_build_object(
    'task_type', p.task_type, 'schedule_limit', p.schedule_limit, 'schedule_interval', p.schedule_interval,
    'max_processing_time', p.max_processing_time, 'max_retry_num', p.max_retry_num,
    'max_retry_interval', p.max_retry_interval, 'shard_max_rows', p.shard_max_rows, 'retention', p.retention,
    'concurrency', p.concurrency, 'paused', p.paused, 'initial_stage', p.initial_stage,
    'created_at', p.created_at, 'updated_at', p.updated_at)
$$;

CREATE FUNCTION asyncflow.wake(p_task_type text) RETURNS void
    LANGUAGE sql
    AS $$
  select pg_notify('asyncflow', p_task_type) where pg_try_advisory_xact_lock(16712, hashtext(p_task_type))
$$;

CREATE TABLE asyncflow.config (
    singleton boolean DEFAULT true NOT NULL,
    max_context_bytes integer DEFAULT 1048576 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT config_max_context_bytes_check CHECK (((max_context_bytes >= 1024) AND (max_context_bytes <= 268435456))),
    CONSTRAINT config_singleton_check CHECK (singleton)
);

CREATE TABLE asyncflow.idempotency_keys (
    task_type text NOT NULL,
    idempotency_key text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE asyncflow.positions (
    task_type text NOT NULL,
    begin_pos integer DEFAULT 1 NOT NULL,
    end_pos integer DEFAULT 1 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT positions_begin_pos_check CHECK ((begin_pos >= 1)),
    CONSTRAINT positions_check CHECK ((begin_pos <= end_pos))
);

CREATE VIEW asyncflow.queue_depth AS
 SELECT y.task_type,
    COALESCE(p.ready, (0)::bigint) AS ready,
    COALESCE(p.delayed, (0)::bigint) AS delayed,
    COALESCE(r.running, (0)::bigint) AS running,
    (COALESCE(EXTRACT(epoch FROM (now() - p.oldest_ready)), (0)::numeric))::double precision AS oldest_ready_age,
    y.paused
   FROM ((asyncflow.task_types y
     LEFT JOIN LATERAL ( SELECT count(*) FILTER (WHERE (t.order_time <= now())) AS ready,
            count(*) FILTER (WHERE (t.order_time > now())) AS delayed,
            min(t.order_time) FILTER (WHERE (t.order_time <= now())) AS oldest_ready
           FROM asyncflow.tasks t
          WHERE ((t.task_type = y.task_type) AND (t.status = 'pending'::asyncflow.task_status))) p ON (true))
     LEFT JOIN LATERAL ( SELECT count(*) AS running
           FROM asyncflow.tasks t
          WHERE ((t.task_type = y.task_type) AND (t.status = 'running'::asyncflow.task_status))) r ON (true));

CREATE TABLE asyncflow.refinery_schema_history (
    version integer NOT NULL,
    name character varying(255),
    applied_on character varying(255),
    checksum character varying(255)
);

CREATE TABLE asyncflow.shards (
    task_type text NOT NULL,
    shard integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    closed_at timestamp with time zone,
    dropped_at timestamp with time zone
);

CREATE TABLE asyncflow.stage_times (
    task_type text NOT NULL,
    stage text NOT NULL,
    slot smallint NOT NULL,
    calls bigint DEFAULT 0 NOT NULL,
    seconds double precision DEFAULT 0 NOT NULL,
    buckets bigint[] NOT NULL
);

CREATE TABLE asyncflow.type_counters (
    task_type text NOT NULL,
    slot smallint NOT NULL,
    claimed bigint DEFAULT 0 NOT NULL,
    succeeded bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    retried bigint DEFAULT 0 NOT NULL,
    rescued bigint DEFAULT 0 NOT NULL
);

ALTER TABLE ONLY asyncflow.config
    ADD CONSTRAINT config_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY asyncflow.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (task_type, idempotency_key);

ALTER TABLE ONLY asyncflow.positions
    ADD CONSTRAINT positions_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.refinery_schema_history
    ADD CONSTRAINT refinery_schema_history_pkey PRIMARY KEY (version);

ALTER TABLE ONLY asyncflow.shards
    ADD CONSTRAINT shards_pkey PRIMARY KEY (task_type, shard);

ALTER TABLE ONLY asyncflow.stage_times
    ADD CONSTRAINT stage_times_pkey PRIMARY KEY (task_type, stage, slot);

ALTER TABLE ONLY asyncflow.task_types
    ADD CONSTRAINT task_types_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.type_counters
    ADD CONSTRAINT type_counters_pkey PRIMARY KEY (task_type, slot);

CREATE INDEX idempotency_keys_shard ON asyncflow.idempotency_keys USING btree (task_type, shard);

ALTER TABLE ONLY asyncflow.idempotency_keys
    ADD CONSTRAINT idempotency_keys_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.positions
    ADD CONSTRAINT positions_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.shards
    ADD CONSTRAINT shards_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

GRANT USAGE ON SCHEMA asyncflow TO asyncflow_client;
GRANT USAGE ON SCHEMA asyncflow TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.advance_begin_pos(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.append_log(p_log jsonb, p_entry jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.check_settings(p_settings jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_task_exists(p_task_type text, p_shard integer, p_id bigint, p_task_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_type_name(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.create_shard(p_task_type text, p_shard integer, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_task(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.create_task(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.format_task_id(p_task_type text, p_shard integer, p_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.get_task(task_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.get_task(task_id text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamp with time zone, p_single boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.is_timestamptz(p_text text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.list_tasks(p_task_type text, p_status asyncflow.task_status, p_stage text, p_user_id text, p_after text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_tasks(p_task_type text, p_status asyncflow.task_status, p_stage text, p_user_id text, p_after text, p_limit integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.next_due(p_task_type text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.next_due(p_task_type text) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.parse_task_id(p_task_id text, OUT task_type text, OUT shard integer, OUT id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.raise_error(p_code text, p_message text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.register_task_type(task_type text, settings jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.register_task_type(task_type text, settings jsonb) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.rescue_expired(p_now timestamp with time zone, p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.retry_backoff(p_attempt integer, p_max integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.roll_shard(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.shard_is_live(p_task_type text, p_shard integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.stage_time_bounds() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.task_json(t asyncflow.tasks) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.task_type_json(p asyncflow.task_types) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wake(p_task_type text) FROM PUBLIC;

GRANT SELECT ON TABLE asyncflow.queue_depth TO asyncflow_client;

