-- V41: many queues within a type (SPEC "Many queues", seed tablestore-massive-topic-queue).
--
-- A task may carry a queue_key (a crawler's site, a tenant): create_task(..., queue_key => 'k'),
-- create_tasks' "queue_key" field, the HTTP API's. The key is kept on every task; it changes how
-- tasks are claimed only in a type whose setting fair_queues is true:
--   - Turns: a claim takes one task per key in turn, the keys in the order of their text, from
--     the key after the one the type's last claim stopped at (asyncflow.queue_cursors), round
--     and round until the batch is full or a whole round finds nothing more. A key with a
--     backlog of a million tasks gets one task per round, as a key with one does: a long tail
--     never blocks new work, and no key waits for another's backlog. Tasks without a key are the
--     queue '' (the index below reads coalesce(queue_key, '')). Within a key, order_time is the
--     order as everywhere: priority is seconds ahead, so higher layers go first and lower ones
--     age forward.
--   - queue_concurrency: at most this many tasks of one key running at once (null: no limit);
--     asyncflow.set_queue_limit gives one key a limit of its own (0 holds the key), kept in
--     asyncflow.queue_limits. asyncflow.queue_keys lists a fair type's queues with their depth.
--     The claimers of such a type take turns: each waits for the type's transaction-scoped
--     advisory lock (16713, hashtext(type)) before counting, so two claims never both see room
--     for the same last slot (one lock per claim, whatever the number of keys: a lock per key
--     would fill the server's lock table).
--   - The type's own concurrency and paused settings apply as before; held claims (V22) are not
--     used for such a type (its claims commit at once, as with a concurrency limit).
--   - Nothing else changes: leases, rescue, retries, cancel and retention are per task.
-- Turning fair_queues on creates two indexes on the type's tasks (inherited by every shard):
-- "tasks_<type>$key_ready" (coalesce(queue_key, ''), order_time) where pending, which a claim
-- walks one key at a time, and "tasks_<type>$key_running" (coalesce(queue_key, '')) where
-- running, which counts a key's running tasks. The '$' cannot occur in a type name, so these
-- names are never those of another type's objects (type x_key's ready index is tasks_x_key_ready).
-- Turning it off drops them. CREATE INDEX holds writes to the type's
-- tasks while it builds (waiting at most 5 s for its lock); other types are not touched, and a
-- type without the setting pays nothing on insert or claim.
-- Functions are replaced whole (the migration convention).

alter table asyncflow.task_types
  add column fair_queues boolean not null default false,
  add column queue_concurrency integer check (queue_concurrency between 1 and 1000000);

-- Where the type's last fair claim stopped: the next one starts at the key after after_key.
create table asyncflow.queue_cursors (
  task_type text primary key references asyncflow.task_types on delete cascade,
  -- null: from the first key
  after_key text,
  updated_at timestamptz not null default now()
);
revoke all on asyncflow.queue_cursors from public;

-- Creates or drops the type's key indexes to match fair_queues; when they already match, takes
-- no lock (a worker registers its types at every start). Identifiers from a checked type name,
-- quoted with %I.
create function asyncflow.set_queue_indexes(p_task_type text, p_on boolean) returns void
language plpgsql as $fn$
declare
  v_have integer;
begin
  perform asyncflow.check_type_name(p_task_type);
  select count(*) into v_have from pg_catalog.pg_class c
  where c.relnamespace = 'asyncflow'::regnamespace
    and c.relname in ('tasks_' || p_task_type || '$key_ready', 'tasks_' || p_task_type || '$key_running');
  if v_have = (case when p_on then 2 else 0 end) then
    return;
  end if;
  perform set_config('lock_timeout', '5s', true);
  if p_on then
    execute format('create index if not exists %I on asyncflow.%I (coalesce(queue_key, %L), order_time) '
      'where status = ''pending''', 'tasks_' || p_task_type || '$key_ready', 'tasks_' || p_task_type, '');
    execute format('create index if not exists %I on asyncflow.%I (coalesce(queue_key, %L)) '
      'where status = ''running''', 'tasks_' || p_task_type || '$key_running', 'tasks_' || p_task_type, '');
  else
    execute format('drop index if exists asyncflow.%I', 'tasks_' || p_task_type || '$key_ready');
    execute format('drop index if exists asyncflow.%I', 'tasks_' || p_task_type || '$key_running');
    delete from asyncflow.queue_cursors where task_type = p_task_type;
  end if;
end
$fn$;
revoke all on function asyncflow.set_queue_indexes(text, boolean) from public;

create or replace function asyncflow.check_settings(p_settings jsonb) returns void
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
      ('paused', 'bool', null, null),
      ('fair_queues', 'bool', null, null),
      ('queue_concurrency', 'int_or_null', 1, 1000000)
    ) s(key, kind, lo, hi) where s.key = v_key;
    if not found then
      perform asyncflow.raise_error('AF006', format('unknown setting %L (known: schedule_limit, schedule_interval, '
        'max_processing_time, max_retry_num, max_retry_interval, shard_max_rows, retention, concurrency, '
        'initial_stage, paused, fair_queues, queue_concurrency)', v_key));
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

create or replace function asyncflow.task_type_json(p asyncflow.task_types) returns jsonb
language sql stable as $$
  select jsonb_build_object(
    'task_type', p.task_type, 'schedule_limit', p.schedule_limit, 'schedule_interval', p.schedule_interval,
    'max_processing_time', p.max_processing_time, 'max_retry_num', p.max_retry_num,
    'max_retry_interval', p.max_retry_interval, 'shard_max_rows', p.shard_max_rows, 'retention', p.retention,
    'concurrency', p.concurrency, 'paused', p.paused, 'initial_stage', p.initial_stage,
    'fair_queues', p.fair_queues, 'queue_concurrency', p.queue_concurrency,
    'created_at', p.created_at, 'updated_at', p.updated_at)
$$;


-- (V41) fair_queues and queue_concurrency; the key indexes follow fair_queues
create or replace function asyncflow.register_task_type(task_type text, settings jsonb default '{}')
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
    perform asyncflow.check_new_type_name(p_task_type);
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
    schedule_limit = coalesce((p_settings ->> 'schedule_limit')::numeric::integer, schedule_limit),
    schedule_interval = coalesce((p_settings ->> 'schedule_interval')::double precision, schedule_interval),
    max_processing_time = coalesce((p_settings ->> 'max_processing_time')::numeric::integer, max_processing_time),
    max_retry_num = coalesce((p_settings ->> 'max_retry_num')::numeric::integer, max_retry_num),
    max_retry_interval = coalesce((p_settings ->> 'max_retry_interval')::numeric::integer, max_retry_interval),
    shard_max_rows = coalesce((p_settings ->> 'shard_max_rows')::numeric::bigint, shard_max_rows),
    retention = coalesce((p_settings ->> 'retention')::numeric::integer, retention),
    concurrency = case when p_settings ? 'concurrency' then (p_settings ->> 'concurrency')::numeric::integer else concurrency end,
    paused = coalesce((p_settings ->> 'paused')::boolean, paused),
    initial_stage = coalesce(p_settings ->> 'initial_stage', initial_stage),
    fair_queues = coalesce((p_settings ->> 'fair_queues')::boolean, fair_queues),
    queue_concurrency = case when p_settings ? 'queue_concurrency'
      then (p_settings ->> 'queue_concurrency')::numeric::integer else queue_concurrency end,
    updated_at = v_now
  where task_type = p_task_type
  returning * into v_type;
  -- (V41) the key indexes follow fair_queues; the type's row is locked above, so two
  -- registrations never build or drop them at once
  if p_settings ? 'fair_queues' then
    perform asyncflow.set_queue_indexes(p_task_type, v_type.fair_queues);
  end if;
  return asyncflow.task_type_json(v_type);
end
$$;

-- (V41) the task's queue_key
create or replace function asyncflow.task_json(t asyncflow.tasks) returns jsonb
language sql stable as $$
  select jsonb_build_object(
    'id', asyncflow.format_task_id(t.task_type, t.shard, t.id), 'type', t.task_type, 'stage', t.stage,
    'status', t.status, 'priority', t.priority, 'attempt', t.attempt, 'retry_count', t.retry_count,
    'max_retry_num', t.max_retry_num, 'max_retry_interval', t.max_retry_interval, 'claim_seq', t.claim_seq,
    'owner', case when t.status <> 'succeeded' then t.owner end, 'lease_until', t.lease_until,
    'order_time', t.order_time, 'user_id', t.user_id, 'queue_key', t.queue_key,
    'idempotency_key', t.idempotency_key, 'context', t.context, 'result', t.result, 'error', t.last_error,
    'schedule_log', asyncflow.task_log(t), 'created_at', t.created_at, 'updated_at', t.updated_at,
    'finished_at', t.finished_at)
$$;

-- create_task and create_task_general take queue_key as their last argument (after p_now, so a
-- call that passes p_now by position means what it meant). A function's arguments are its
-- identity: the old forms are dropped, not overloaded (a call leaving out the defaults would match
-- both), and create_task's grant is given again.
DROP FUNCTION asyncflow.create_task(text, jsonb, integer, timestamptz, text, text, text, timestamptz);
DROP FUNCTION asyncflow.create_task_general(text, jsonb, integer, timestamptz, text, text, text, timestamptz);

CREATE FUNCTION asyncflow.create_task_general(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, queue_key text DEFAULT NULL::text) RETURNS text
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
  -- Without an idempotency key: the checks, each with its error, then one INSERT ... VALUES.
  if idempotency_key is null then
    select * into v_type from asyncflow.task_types y where y.task_type = create_task_general.task_type;
    if not found then
      perform asyncflow.check_type_name(create_task_general.task_type);
      perform asyncflow.raise_error('AF001', format('unknown task type %L', create_task_general.task_type));
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
    elsif run_at is not null and not run_at between '0002-01-01 00:00:00+00' and '9999-01-01 00:00:00+00' then
      -- (V29) years 2 to 9998: the task's times stay years 1 to 9999 in any time zone, which
      -- JSON readers of RFC 3339 can read (V26 allowed from 4713 BC, written "... BC")
      perform asyncflow.raise_error('AF006', format('run_at must be a timestamp from 0002-01-01 to 9999-01-01 (UTC), got %s', run_at));
    elsif stage is not null and stage !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
      perform asyncflow.raise_error('AF006', format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', to_jsonb(stage)));
    elsif length(user_id) > 255 then
      perform asyncflow.raise_error('AF006',
        format('user_id must be a string of at most 255 characters, got %s', to_jsonb(user_id)));
    elsif length(queue_key) not between 1 and 255 then
      perform asyncflow.raise_error('AF006',
        format('queue_key must be a string of 1 to 255 characters, got %s', to_jsonb(queue_key)));
    end if;
    select end_pos into v_pos from asyncflow.positions p where p.task_type = create_task_general.task_type;
    v_id := nextval(v_type.id_seq);
    insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
      max_retry_interval, order_time, user_id, queue_key, context, created_at, updated_at)
    values (create_task_general.task_type, v_pos, v_id, coalesce(stage, v_type.initial_stage), 'pending', coalesce(priority, 0),
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce(run_at, v_now) - make_interval(secs => coalesce(priority, 0)),
      user_id, queue_key, coalesce(nullif(context, 'null'::jsonb), '{}'::jsonb), v_now, v_now);
    perform asyncflow.wake(create_task_general.task_type);
    return asyncflow.format_task_id(create_task_general.task_type, v_pos, v_id);
  end if;

  v_task := jsonb_build_object('context', coalesce(context, '{}'::jsonb), 'priority', coalesce(priority, 0));
  if run_at is not null then v_task := v_task || jsonb_build_object('run_at', run_at); end if;
  if stage is not null then v_task := v_task || jsonb_build_object('stage', stage); end if;
  if idempotency_key is not null then v_task := v_task || jsonb_build_object('idempotency_key', idempotency_key); end if;
  if user_id is not null then v_task := v_task || jsonb_build_object('user_id', user_id); end if;
  if queue_key is not null then v_task := v_task || jsonb_build_object('queue_key', queue_key); end if;
  return (asyncflow.insert_tasks(task_type, jsonb_build_array(v_task), p_now, true))[1];
end
$_$;


CREATE FUNCTION asyncflow.create_task(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, queue_key text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    AS $_$
declare
  -- only keyword and pg_catalog types: a variable's type is looked up when the body is compiled,
  -- under the search_path of the first caller in the session
  v_now timestamp with time zone := coalesce(p_now, pg_catalog.now());
  v_pos integer;
  v_id bigint;
  v_max_bytes integer;
  v_seq pg_catalog.regclass;
  v_initial_stage pg_catalog.text;
  v_retry_num integer;
  v_retry_interval integer;
begin
  -- No SET search_path (V33): every name below is schema-qualified, operators included.
  -- (V38) And no comparison takes the caller's collation: a plpgsql function's text parameters
  -- take the collation of the call's arguments, and under a nondeterministic one of the caller's
  -- (CREATE COLLATION needs no privilege) 'a_b' = 'ab', so the lookup found another type's row.
  if idempotency_key is null then
    -- What the checks and the row need, in one read of enqueue_info (V25); the checks in one
    -- expression, the same as create_task_general's; the wake written out (asyncflow.wake's
    -- try-lock and NOTIFY).
    select e.end_pos, e.id_seq, e.initial_stage, e.max_retry_num, e.max_retry_interval, e.max_context_bytes
      into v_pos, v_seq, v_initial_stage, v_retry_num, v_retry_interval, v_max_bytes
      from asyncflow.enqueue_info e
      where e.task_type operator(pg_catalog.=) (create_task.task_type collate pg_catalog."default");
    if found
      and (context is null
        or pg_catalog.jsonb_typeof(context) operator(pg_catalog.=) any ('{object,null}'::pg_catalog.text[]))
      and (priority is null
        or (priority operator(pg_catalog.>=) 0 and priority operator(pg_catalog.<=) 31104000))
      and coalesce(pg_catalog.pg_column_size(context) operator(pg_catalog.<=) v_max_bytes, true)
      and (run_at is null
        or (run_at operator(pg_catalog.>=) '0002-01-01 00:00:00+00'::timestamp with time zone
          and run_at operator(pg_catalog.<=) '9999-01-01 00:00:00+00'::timestamp with time zone))
      and (stage is null or stage operator(pg_catalog.~) '^[A-Za-z0-9_.:/-]{1,64}$'::pg_catalog.text)
      and coalesce(pg_catalog.length(user_id) operator(pg_catalog.<=) 255, true)
      and (queue_key is null or (pg_catalog.length(queue_key) operator(pg_catalog.>=) 1
        and pg_catalog.length(queue_key) operator(pg_catalog.<=) 255)) then
      v_id := pg_catalog.nextval(v_seq);
      insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
        max_retry_interval, order_time, user_id, queue_key, context, created_at, updated_at)
      values (create_task.task_type, v_pos, v_id, coalesce(stage, v_initial_stage), 'pending',
        coalesce(priority, 0), v_retry_num, v_retry_interval,
        coalesce(run_at, v_now) operator(pg_catalog.-) pg_catalog.make_interval(secs => coalesce(priority, 0)),
        user_id, queue_key,
        case when context operator(pg_catalog.=) 'null'::pg_catalog.jsonb then '{}'::pg_catalog.jsonb
          else coalesce(context, '{}'::pg_catalog.jsonb) end,
        v_now, v_now);
      if pg_catalog.pg_try_advisory_xact_lock(16712, pg_catalog.hashtext(create_task.task_type collate pg_catalog."default")) then
        perform pg_catalog.pg_notify('asyncflow', create_task.task_type);
      end if;
      -- asyncflow.format_task_id, written out (its body would be read under the caller's path)
      return create_task.task_type operator(pg_catalog.||) '-' operator(pg_catalog.||) v_pos::pg_catalog.text
        operator(pg_catalog.||) '-' operator(pg_catalog.||) v_id::pg_catalog.text;
    end if;
  end if;
  -- (V38) the explicit collation makes the call's, so every text parameter's, the default one
  return asyncflow.create_task_general(create_task.task_type collate pg_catalog."default", context, priority, run_at, stage,
    idempotency_key, user_id, p_now, queue_key);
end
$_$;


REVOKE ALL ON FUNCTION asyncflow.create_task_general(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION asyncflow.create_task(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION asyncflow.create_task(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text) TO asyncflow_client;

-- (V41) each element's queue_key
CREATE OR REPLACE FUNCTION asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamp with time zone, p_single boolean) RETURNS text[]
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

  -- Anything that could be wrong? One scan of the elements (an error in it counts as "maybe").
  if pg_column_size(p_tasks) > v_max_bytes
    or coalesce(jsonb_path_exists(p_tasks, '$[*] ? (@.type() != "object"
          || (@.context.type() != "object" && @.context.type() != "null")
          || (@.priority.type() != "null" && (@.priority.type() != "number" || @.priority < 0
              || @.priority > 31104000 || @.priority != @.priority.floor()))
          || @.run_at.type() != "null"
          || (@.stage.type() != "null" && (@.stage.type() != "string"
              || !(@.stage like_regex "^[A-Za-z0-9_.:/-]{1,64}$")))
          || (@.idempotency_key.type() != "null" && (@.idempotency_key.type() != "string"
              || !(@.idempotency_key like_regex "^.{1,255}$" flag "s")))
          || (@.user_id.type() != "null" && (@.user_id.type() != "string"
              || !(@.user_id like_regex "^.{0,255}$" flag "s")))
          || (@.queue_key.type() != "null" && (@.queue_key.type() != "string"
              || !(@.queue_key like_regex "^.{1,255}$" flag "s")))
          || exists(@.keyvalue() ? (@.key != "context" && @.key != "priority" && @.key != "run_at"
              && @.key != "stage" && @.key != "idempotency_key" && @.key != "user_id"
              && @.key != "queue_key")))', silent => true), true)
  then
    select n, left(problem, 5) as code, substr(problem, 6) as why into v_bad from (
      select n, case
        when jsonb_typeof(e) <> 'object' then 'AF006must be a JSON object'
        when exists (select 1 from jsonb_object_keys(e) k
                     where k not in ('context', 'priority', 'run_at', 'stage', 'idempotency_key', 'user_id', 'queue_key'))
          then 'AF006' || format('has unknown field %L (known: context, priority, run_at, stage, idempotency_key, user_id, queue_key)',
            (select k from jsonb_object_keys(e) k
             where k not in ('context', 'priority', 'run_at', 'stage', 'idempotency_key', 'user_id', 'queue_key') limit 1))
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
          then 'AF006' || format('run_at must be a timestamp from 0002-01-01 to 9999-01-01 (UTC), got %s', e -> 'run_at')
        when jsonb_typeof(e -> 'stage') not in ('string', 'null') or (e ->> 'stage') !~ '^[A-Za-z0-9_.:/-]{1,64}$'
          then 'AF006' || format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', e -> 'stage')
        when jsonb_typeof(e -> 'idempotency_key') not in ('string', 'null') or length(e ->> 'idempotency_key') not between 1 and 255
          then 'AF006' || format('idempotency_key must be a string of 1 to 255 characters, got %s', e -> 'idempotency_key')
        when jsonb_typeof(e -> 'user_id') not in ('string', 'null') or length(e ->> 'user_id') > 255
          then 'AF006' || format('user_id must be a string of at most 255 characters, got %s', e -> 'user_id')
        when jsonb_typeof(e -> 'queue_key') not in ('string', 'null') or length(e ->> 'queue_key') not between 1 and 255
          then 'AF006' || format('queue_key must be a string of 1 to 255 characters, got %s', e -> 'queue_key')
      end as problem
      from jsonb_array_elements(p_tasks) with ordinality x(e, n)
    ) checked where problem is not null order by n limit 1;
    if found then
      perform asyncflow.raise_error(v_bad.code,
        case when p_single then v_bad.why else format('tasks[%s]: %s', v_bad.n - 1, v_bad.why) end);
    end if;
  end if;

  select end_pos into v_pos from asyncflow.positions where task_type = p_task_type;
  if not coalesce(jsonb_path_exists(p_tasks, '$[*].idempotency_key ? (@.type() != "null")', silent => true), true) then
    -- rows come out of jsonb_to_recordset in array order and take their ids in that order, so
    -- ordering the ids orders them as the input
    with inserted as (
      insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
        max_retry_interval, order_time, user_id, queue_key, context, created_at, updated_at)
      select p_task_type, v_pos, nextval(v_type.id_seq), coalesce(x.stage, v_type.initial_stage), 'pending',
        coalesce(x.priority, 0)::integer, v_type.max_retry_num, v_type.max_retry_interval,
        coalesce(x.run_at, v_now) - coalesce(x.priority, 0) * interval '1 second',
        x.user_id, x.queue_key, coalesce(nullif(x.context, 'null'::jsonb), '{}'::jsonb), v_now, v_now
      from jsonb_to_recordset(p_tasks) as x(context jsonb, priority numeric, run_at timestamptz, stage text, user_id text,
        queue_key text)
      returning id
    )
    select array_agg(asyncflow.format_task_id(p_task_type, v_pos, i.id) order by i.id) into v_ids from inserted i;
    perform asyncflow.wake(p_task_type);
    return coalesce(v_ids, '{}');
  end if;

  -- An insert racing a roll may land in the shard just closed; begin_pos is recomputed on every
  -- maintenance pass (advance_begin_pos), so such a task is found again (v_pos read above).

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
      max_retry_interval, order_time, user_id, queue_key, idempotency_key, context, created_at, updated_at)
    select p_task_type, v_pos, i.id, coalesce(i.e ->> 'stage', v_type.initial_stage), 'pending', i.priority,
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce((i.e ->> 'run_at')::timestamptz, v_now) - make_interval(secs => i.priority),
      i.e ->> 'user_id', i.e ->> 'queue_key', i.ikey, coalesce(nullif(i.e -> 'context', 'null'::jsonb), '{}'::jsonb), v_now, v_now
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

-- Per-key limits that differ from the type's queue_concurrency: a busy tenant allowed more, a
-- misbehaving site held (0: none of its tasks is claimed until the limit goes). Read by the
-- claims of a type with fair_queues; the key '' is the queue of the tasks without a key.
create table asyncflow.queue_limits (
  task_type text not null references asyncflow.task_types on delete cascade,
  queue_key text not null check (length(queue_key) <= 255),
  concurrency integer not null check (concurrency between 0 and 1000000),
  updated_at timestamptz not null default now(),
  primary key (task_type, queue_key)
);
revoke all on asyncflow.queue_limits from public;

-- Sets (or with a null concurrency removes) one key's own limit; returns the limit that now
-- applies to the key (its own, else the type's queue_concurrency; null: none). The key as in
-- create_task, or '' for the tasks without one. Only for a type with fair_queues (no other claim
-- reads it). Setting a limit above 0 or removing one wakes the type's workers. Errors: AF001,
-- AF003, AF006.
create function asyncflow.set_queue_limit(p_task_type text, p_queue_key text, p_concurrency integer)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_type asyncflow.task_types;
begin
  select * into v_type from asyncflow.task_types y where y.task_type = p_task_type collate "default";
  if not found then
    perform asyncflow.check_type_name(p_task_type);
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  if p_queue_key is null or length(p_queue_key) > 255 then
    perform asyncflow.raise_error('AF006',
      format('queue_key must be a string of at most 255 characters ('''' for the tasks without a key), got %s',
        coalesce(to_jsonb(p_queue_key)::text, 'null')));
  end if;
  if p_concurrency not between 0 and 1000000 then
    perform asyncflow.raise_error('AF006',
      format('concurrency must be an integer between 0 and 1000000 (0 holds the key), got %s', p_concurrency));
  end if;
  if not v_type.fair_queues then
    perform asyncflow.raise_error('AF006', format('task type %L does not have fair_queues: no claim would read '
      'a limit per queue key', v_type.task_type));
  end if;
  if p_concurrency is null then
    delete from asyncflow.queue_limits l
    where l.task_type = v_type.task_type and l.queue_key = p_queue_key collate "default";
    -- a hold let go, or a lower limit of its own gone: the key's waiting tasks may run now
    if found then
      perform asyncflow.wake(v_type.task_type);
    end if;
    return v_type.queue_concurrency;
  end if;
  insert into asyncflow.queue_limits as l (task_type, queue_key, concurrency, updated_at)
  values (v_type.task_type, p_queue_key collate "default", p_concurrency, now())
  on conflict (task_type, queue_key) do update set concurrency = excluded.concurrency, updated_at = excluded.updated_at;
  -- a key given more room may have work waiting now (a key held, 0, has none to wake for)
  if p_concurrency > 0 then
    perform asyncflow.wake(v_type.task_type);
  end if;
  return p_concurrency;
end
$$;
revoke all on function asyncflow.set_queue_limit(text, text, integer) from public;
grant execute on function asyncflow.set_queue_limit(text, text, integer) to asyncflow_client;

-- The queues of a type with fair_queues, in key order after p_after (null: from the first), at
-- most p_limit (1 to 1000) keys that have pending or running tasks: tasks ready now, delayed,
-- running, the age of the oldest ready one in seconds (0 when none), and the limit that applies
-- (the key's own, else queue_concurrency; null: none). Reads the key indexes: a loose scan for
-- the keys, then the listed keys' own entries. Errors: AF001, AF003, AF006 (a type without
-- fair_queues has no key indexes to read).
create function asyncflow.queue_keys(p_task_type text, p_after text default null, p_limit integer default 100)
returns table (queue_key text, ready bigint, delayed bigint, running bigint, oldest_ready_age double precision,
  concurrency integer)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_type asyncflow.task_types;
begin
  select * into v_type from asyncflow.task_types y where y.task_type = p_task_type collate "default";
  if not found then
    perform asyncflow.check_type_name(p_task_type);
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  if not v_type.fair_queues then
    perform asyncflow.raise_error('AF006', format('task type %L does not have fair_queues: its tasks are not '
      'kept by queue key', v_type.task_type));
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')));
  end if;
  -- the name passed check_type_name when the type was registered; p_after and p_limit go as values
  return query execute format($q$
    -- each walk stops after $2 keys: the first $2 keys of the union are among the first $2 of each
    with recursive pending_keys(k, n) as (
      (select coalesce(t.queue_key, ''), 1 from asyncflow.%1$I t
       where t.status = 'pending' and coalesce(t.queue_key, '') %2$s $1 order by 1 limit 1)
      union all
      select (select coalesce(t.queue_key, '') from asyncflow.%1$I t
              where t.status = 'pending' and coalesce(t.queue_key, '') > p.k order by 1 limit 1), p.n + 1
      from pending_keys p where p.k is not null and p.n < $2
    ), running_keys(k, n) as (
      (select coalesce(t.queue_key, ''), 1 from asyncflow.%1$I t
       where t.status = 'running' and coalesce(t.queue_key, '') %2$s $1 order by 1 limit 1)
      union all
      select (select coalesce(t.queue_key, '') from asyncflow.%1$I t
              where t.status = 'running' and coalesce(t.queue_key, '') > r.k order by 1 limit 1), r.n + 1
      from running_keys r where r.k is not null and r.n < $2
    ), keys as (
      select u.k from (select k from pending_keys union select k from running_keys) u
      where u.k is not null order by u.k limit $2
    )
    select k.k, p.ready, p.delayed, r.running,
      coalesce(extract(epoch from (now() - p.oldest)), 0)::double precision,
      coalesce(l.concurrency, $3)
    from keys k
    cross join lateral (
      select count(*) filter (where t.order_time <= now()) as ready,
        count(*) filter (where t.order_time > now()) as delayed,
        min(t.order_time) filter (where t.order_time <= now()) as oldest
      from asyncflow.%1$I t where t.status = 'pending' and coalesce(t.queue_key, '') = k.k
    ) p
    cross join lateral (
      select count(*) as running from asyncflow.%1$I t where t.status = 'running' and coalesce(t.queue_key, '') = k.k
    ) r
    left join asyncflow.queue_limits l on l.task_type = %3$L and l.queue_key = k.k
    order by k.k
    $q$, 'tasks_' || v_type.task_type, case when p_after is null then '>=' else '>' end, v_type.task_type)
  using coalesce(p_after, '') collate "default", p_limit, v_type.queue_concurrency;
end
$$;
revoke all on function asyncflow.queue_keys(text, text, integer) from public;
grant execute on function asyncflow.queue_keys(text, text, integer) to asyncflow_client;

-- create_claim_function (V18) with the fair branch: a type with fair_queues takes its tasks by
-- turns of queue_key (see the header). The branch is chosen at run time from the type's row, as
-- the concurrency limit is; its statements are planned only when first run, so a type without the
-- setting (and without the key indexes they use) never plans them. Keys are taken a batch at a
-- time in two statements: a loose scan of "tasks_<type>$key_ready" walks the next keys with a
-- pending task, each with its oldest task's order_time (one index descent per key and live
-- shard, merged); then one statement claims, in key order, the oldest ready task of each walked
-- key that is due and has room (its own limit from queue_limits, else queue_concurrency, against
-- a count of its running tasks), FOR UPDATE SKIP LOCKED, until the batch is full. A claim walks
-- at most max(4 × its batch + 16, 1000) keys: keys with only delayed, locked or capped tasks are
-- walked and passed; the cursor keeps the place for the next claim.
create or replace function asyncflow.create_claim_function(p_task_type text) returns void
language plpgsql as $fn$
declare
  v_name text := 'type_claim__' || p_task_type;
begin
  perform asyncflow.check_type_name(p_task_type);
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_limit integer, p_now timestamptz default null)
    returns setof asyncflow.claimed_task
    language plpgsql security definer set search_path = pg_catalog, pg_temp
    set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off set enable_hashjoin = off
    set enable_mergejoin = off set jit = off set plan_cache_mode = force_generic_plan as $body$
    declare
      v_task_type constant text := %3$L;
      v_type asyncflow.task_types;
      v_now timestamptz := coalesce(p_now, now());
      v_limit integer;
      v_running bigint;
      -- fair_queues
      v_begin integer;
      v_after text;
      v_at text;
      v_limits boolean;
      v_from text;
      v_keys text[];
      v_heads timestamptz[];
      v_walk integer;
      v_walked integer;
      v_budget integer;
      v_claimed asyncflow.claimed_task[];
      v_claimed_keys text[];
      v_n integer;
      v_wrapped boolean := false;
      v_since integer := 0;
      v_got integer := 0;
      v_probes integer := 0;
    begin
      if p_owner is null or length(p_owner) not between 1 and 200 then
        perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
      end if;
      select * into v_type from asyncflow.task_types where task_type = v_task_type;
      if not found then
        perform asyncflow.raise_error('AF001', format('unknown task type %%L', v_task_type));
      end if;
      if v_type.paused or coalesce(p_limit, 0) <= 0 then
        return;
      end if;
      v_limit := least(p_limit, v_type.schedule_limit);
      if v_type.concurrency is not null then
        perform 1 from asyncflow.task_types where task_type = v_task_type for update;
        select count(*) into v_running from asyncflow.%2$I where status = 'running';
        v_limit := least(v_limit, v_type.concurrency - v_running);
        if v_limit <= 0 then
          return;
        end if;
      end if;
      perform set_config('synchronous_commit', 'off', true);

      if not v_type.fair_queues then
        return query
        with picked as (
          select shard, id from asyncflow.%2$I
          where shard >= (select begin_pos from asyncflow.positions where task_type = v_task_type)
            and status = 'pending' and order_time <= v_now
          order by order_time
          limit v_limit
          for update skip locked
        ), claimed as (
          update asyncflow.%2$I t set
            status = 'running', owner = p_owner, attempt = t.attempt + 1, claim_seq = t.claim_seq + 1,
            claimed_at = v_now, lease_until = v_now + make_interval(secs => v_type.max_processing_time),
            updated_at = v_now
          from picked
          where t.shard = picked.shard and t.id = picked.id
          returning asyncflow.format_task_id(v_task_type, t.shard, t.id) as task_id, v_task_type as task_type,
            t.stage, t.context, t.priority, t.attempt, t.claim_seq, t.user_id, t.lease_until, t.claimed_at
        ), counted as (
          insert into asyncflow.type_counters as k (task_type, slot, claimed)
          select v_task_type, pg_backend_pid() %% 16, count(*) from claimed having count(*) > 0
          on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed
        )
        select * from claimed;
        return;
      end if;

      -- Turns of queue_key, a round at a time: every key with a pending task once, in key order
      -- from the one after the cursor (v_after) to the last, then from the first to the cursor
      -- (the second segment, v_wrapped). Keys are walked a batch at a time (one statement: a
      -- loose scan of the key index), and the walked keys' oldest ready tasks claimed in one more
      -- (one per key, in key order, passing keys at their limit, until the batch is full). A
      -- round that claims nothing (v_since = 0) ends the claim; a single key with a backlog so
      -- fills the batch one task per round. v_at: where the claim stopped (the cursor).
      -- a limit of its own for some key (asyncflow.queue_limits)?
      v_limits := exists (select 1 from asyncflow.queue_limits l where l.task_type = v_task_type);
      if v_type.queue_concurrency is not null or v_limits then
        -- the type's claimers count and claim one at a time; each waits here for the one before
        -- it to commit, and its counts below (each statement a new snapshot) see that claim
        perform pg_advisory_xact_lock(16713, hashtext(v_task_type));
      end if;
      select begin_pos into v_begin from asyncflow.positions where task_type = v_task_type;
      select after_key into v_after from asyncflow.queue_cursors where task_type = v_task_type;
      v_at := v_after;
      v_from := v_after;
      v_budget := greatest(4 * v_limit + 16, 1000);
      while v_got < v_limit and v_probes < v_budget loop
        v_walk := least(greatest(2 * (v_limit - v_got), 32), v_budget - v_probes);
        -- the next keys after v_from (null: from the first) with a pending task, each with its
        -- oldest one's order_time; in the second segment up to v_after
        with recursive walk(k, head, n) as (
          (select coalesce(t.queue_key, ''), t.order_time, 1 from asyncflow.%2$I t
           where v_from is null and t.shard >= v_begin and t.status = 'pending'
           order by coalesce(t.queue_key, ''), t.order_time limit 1)
          union all
          (select coalesce(t.queue_key, ''), t.order_time, 1 from asyncflow.%2$I t
           where v_from is not null and t.shard >= v_begin and t.status = 'pending'
             and coalesce(t.queue_key, '') > v_from
           order by coalesce(t.queue_key, ''), t.order_time limit 1)
          union all
          select x.k, x.head, w.n + 1 from walk w
          cross join lateral (
            select coalesce(t.queue_key, '') as k, t.order_time as head from asyncflow.%2$I t
            where t.shard >= v_begin and t.status = 'pending' and coalesce(t.queue_key, '') > w.k
            order by coalesce(t.queue_key, ''), t.order_time limit 1) x
          where w.n < v_walk and (not v_wrapped or w.k < v_after)
        )
        select array_agg(w.k order by w.n), array_agg(w.head order by w.n) into v_keys, v_heads
        from walk w where not v_wrapped or w.k <= v_after;
        v_walked := coalesce(cardinality(v_keys), 0);
        v_probes := v_probes + v_walked;
        if v_walked > 0 then
          -- the walked keys' oldest ready tasks, one per key that has room, in key order
          with cand as (
            select w.k, w.ord from unnest(v_keys, v_heads) with ordinality w(k, head, ord)
            cross join lateral (
              select coalesce((select l.concurrency from asyncflow.queue_limits l
                               where v_limits and l.task_type = v_task_type and l.queue_key = w.k),
                              v_type.queue_concurrency) as cap) c
            where w.head <= v_now
              and (c.cap is null or (select count(*) from asyncflow.%2$I r
                                     where r.shard >= v_begin and coalesce(r.queue_key, '') = w.k
                                       and r.status = 'running') < c.cap)
          ), picked as (
            select p.shard, p.id, cand.k, cand.ord from cand
            cross join lateral (
              select t.shard, t.id from asyncflow.%2$I t
              where t.shard >= v_begin and coalesce(t.queue_key, '') = cand.k and t.status = 'pending'
                and t.order_time <= v_now
              order by t.order_time limit 1
              for update skip locked) p
            order by cand.ord
            limit v_limit - v_got
          ), claimed as (
            update asyncflow.%2$I t set
              status = 'running', owner = p_owner, attempt = t.attempt + 1, claim_seq = t.claim_seq + 1,
              claimed_at = v_now, lease_until = v_now + make_interval(secs => v_type.max_processing_time),
              updated_at = v_now
            from picked
            where t.shard = picked.shard and t.id = picked.id
            returning row(asyncflow.format_task_id(v_task_type, t.shard, t.id), v_task_type, t.stage, t.context,
              t.priority, t.attempt, t.claim_seq, t.user_id, t.lease_until, t.claimed_at)::asyncflow.claimed_task as task,
              picked.k, picked.ord
          )
          select array_agg(c.task order by c.ord), array_agg(c.k order by c.ord) into v_claimed, v_claimed_keys
          from claimed c;
          v_n := coalesce(cardinality(v_claimed), 0);
          if v_n > 0 then
            return query select * from unnest(v_claimed);
            v_got := v_got + v_n;
            v_since := v_since + v_n;
          end if;
          if v_got >= v_limit then
            v_at := v_claimed_keys[v_n];  -- the keys walked past it get their turn next time
            exit;
          end if;
          v_from := v_keys[v_walked];
          v_at := v_from;
        end if;
        if v_walked < v_walk or (v_wrapped and v_from >= v_after) then
          -- the segment is over
          if not v_wrapped and v_after is not null then
            v_wrapped := true;
            v_from := null;
          else
            -- so is the round
            exit when v_since = 0;
            v_since := 0;
            v_wrapped := false;
            v_from := v_after;
          end if;
        end if;
      end loop;
      -- a claim that claimed nothing and walked all it could leaves the cursor: an idle type's
      -- polls write nothing
      if v_at is distinct from v_after and (v_got > 0 or v_probes >= v_budget) then
        insert into asyncflow.queue_cursors as c (task_type, after_key, updated_at)
        values (v_task_type, v_at, v_now)
        on conflict (task_type) do update set after_key = excluded.after_key, updated_at = excluded.updated_at;
      end if;
      if v_got > 0 then
        insert into asyncflow.type_counters as k (task_type, slot, claimed)
        values (v_task_type, pg_backend_pid() %% 16, v_got)
        on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed;
      end if;
    end
    $body$
    $f$, v_name, 'tasks_' || p_task_type, p_task_type);
  execute format('revoke all on function asyncflow.%I(text, integer, timestamptz) from public', v_name);
  execute format('grant execute on function asyncflow.%I(text, integer, timestamptz) to asyncflow_worker', v_name);
end
$fn$;

-- create_hold_functions (V24) with one change: type_hold__ of a type with fair_queues claims through
-- type_claim__ and holds nothing, as with a concurrency limit.
create or replace function asyncflow.create_hold_functions(p_task_type text) returns void
language plpgsql as $fn$
declare
  v_hold text := 'type_hold__' || p_task_type;
  v_finish text := 'type_finish__' || p_task_type;
begin
  perform asyncflow.check_type_name(p_task_type);
  -- type_hold__<type>(owner, limit): what type_claim__ would claim, locked instead of updated;
  -- attempt, claim_seq, lease_until and claimed_at are the values the claim will have. Must be
  -- the first statement of its transaction (now() is the claim's time).
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_limit integer)
    returns setof asyncflow.held_task
    language plpgsql security definer set search_path = pg_catalog, pg_temp
    set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off set enable_hashjoin = off
    set enable_mergejoin = off set jit = off set plan_cache_mode = force_generic_plan as $body$
    declare
      v_task_type constant text := %3$L;
      v_type asyncflow.task_types;
      v_now constant timestamptz := now();
      v_lease_until timestamptz;
    begin
      if p_owner is null or length(p_owner) not between 1 and 200 then
        perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
      end if;
      select * into v_type from asyncflow.task_types where task_type = v_task_type;
      if not found then
        perform asyncflow.raise_error('AF001', format('unknown task type %%L', v_task_type));
      end if;
      if v_type.paused or coalesce(p_limit, 0) <= 0 then
        return;
      end if;
      if v_type.concurrency is not null or v_type.fair_queues or exists (select 1 from pg_catalog.pg_trigger
          where tgrelid = 'asyncflow.%2$I'::regclass and tgname = 'tg_tasks__workflow') then
        return query select c.*, false from asyncflow.%4$I(p_owner, p_limit) c;
        return;
      end if;
      -- a worker that stops answering (and so never ends the hold) loses its locks; a shorter
      -- limit set on the server stays
      if current_setting('idle_in_transaction_session_timeout') = '0' then
        perform set_config('idle_in_transaction_session_timeout', '60s', true);
      end if;
      v_lease_until := v_now + make_interval(secs => v_type.max_processing_time);
      return query
      select asyncflow.format_task_id(v_task_type, t.shard, t.id), v_task_type, t.stage, t.context, t.priority,
        t.attempt + 1, t.claim_seq + 1, t.user_id, v_lease_until, v_now, true
      from asyncflow.%2$I t
      where t.shard >= (select begin_pos from asyncflow.positions where task_type = v_task_type)
        and t.status = 'pending' and t.order_time <= v_now
      order by t.order_time
      limit least(p_limit, v_type.schedule_limit)
      -- FOR UPDATE, not FOR NO KEY UPDATE: a key-share lock taken beside it would make the
      -- row's xmax a multixact, and the finish knows its rows by xmax = its xid
      for update of t skip locked;
    end
    $body$
    $f$, v_hold, 'tasks_' || p_task_type, p_task_type, 'type_claim__' || p_task_type);

  -- type_finish__<type>(owner, shards, ids, claim_seqs, outcomes, results, stages, contexts,
  -- seconds): ends a hold, in the hold's transaction. Each task's outcome is its call's reply when
  -- it came while the hold was open: 'succeed' (with its result) or 'advance' (with the next
  -- stage and, or null to keep it, the next context), its call having taken `seconds` from the
  -- claim; null when the call has not replied. A success within max_context_bytes ends
  -- succeeded (finished_at, the stage-time histogram); an advance whose stage and context would
  -- pass report_tasks' checks goes on to its next stage as a report would have put it (pending,
  -- attempt 0, its schedule-log entry, ready at once); every other task is claimed ('running',
  -- leased) and its reply, if any, is reported as usual. Only rows this transaction has locked
  -- (the hold's: their xmax is its xid), pending, whose claim_seq is one behind the one given,
  -- change: without the hold a finish changes nothing. Answers (accepted, status, lease) come
  -- only for the tasks that did not end as asked: refused (not accepted), or claimed although
  -- their call replied (a result too large, a bad stage: its report will say so); no answer
  -- means the reply was written, or the task claimed.
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_shards integer[], p_ids bigint[],
      p_claim_seqs integer[], p_outcomes text[], p_results jsonb[], p_stages text[], p_contexts jsonb[],
      p_seconds double precision[])
    returns table (n bigint, task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
    language plpgsql security definer set search_path = pg_catalog, pg_temp
    set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $body$
    #variable_conflict use_column
    declare
      v_task_type constant text := %3$L;
      v_claimed_at constant timestamptz := now();
      v_ended constant double precision := date_part('epoch', clock_timestamp() - v_claimed_at);
      v_xid constant xid := pg_current_xact_id()::xid;
      v_lease_until timestamptz;
      v_max_bytes integer;
    begin
      if p_owner is null or length(p_owner) not between 1 and 200 then
        perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
      end if;
      if cardinality(p_ids) > 10000 or cardinality(p_shards) is distinct from cardinality(p_ids)
        or cardinality(p_claim_seqs) is distinct from cardinality(p_ids)
        or cardinality(p_outcomes) is distinct from cardinality(p_ids)
        or cardinality(p_results) is distinct from cardinality(p_ids)
        or cardinality(p_stages) is distinct from cardinality(p_ids)
        or cardinality(p_contexts) is distinct from cardinality(p_ids)
        or cardinality(p_seconds) is distinct from cardinality(p_ids)
        -- unnest would flatten an array of more dimensions
        or coalesce(array_ndims(p_shards), 1) <> 1 or coalesce(array_ndims(p_ids), 1) <> 1
        or coalesce(array_ndims(p_claim_seqs), 1) <> 1 or coalesce(array_ndims(p_outcomes), 1) <> 1
        or coalesce(array_ndims(p_results), 1) <> 1 or coalesce(array_ndims(p_stages), 1) <> 1
        or coalesce(array_ndims(p_contexts), 1) <> 1 or coalesce(array_ndims(p_seconds), 1) <> 1 then
        perform asyncflow.raise_error('AF006', 'shards, ids, claim_seqs, outcomes, results, stages, contexts and '
          'seconds: one-dimensional arrays of one length, at most 10000');
      end if;
      if exists (select 1 from unnest(p_outcomes) o where o not in ('succeed', 'advance')) then
        perform asyncflow.raise_error('AF006', 'a held task''s outcome must be succeed, advance or null');
      end if;
      select v_claimed_at + make_interval(secs => max_processing_time) into v_lease_until
      from asyncflow.task_types where task_type = v_task_type;
      select max_context_bytes into v_max_bytes from asyncflow.config;
      if array_position(p_outcomes, 'succeed') is null and array_position(p_outcomes, 'advance') is null then
        -- claims only: as type_claim__, not waiting for the disk
        perform set_config('synchronous_commit', 'off', true);
      end if;
      return query
      with r as (
        -- the hold's tasks, named by shard and number (no ids to parse); each once, as the
        -- worker names them (a task named twice is changed for one of its mentions, which one
        -- is not defined, and the other is answered as refused)
        select x.n, x.shard, x.id, x.claim_seq, x.outcome, x.result, x.stage,
          nullif(x.context, 'null'::jsonb) as context,
          -- the reply can be written here: report_tasks' checks of a success or an advance
          case x.outcome
            when 'succeed' then coalesce(pg_column_size(x.result) <= v_max_bytes, true)
            when 'advance' then coalesce(x.stage ~ '^[A-Za-z0-9_.:/-]{1,64}$', false)
              and coalesce(jsonb_typeof(x.context) in ('object', 'null'), true)
              and coalesce(pg_column_size(x.context) <= v_max_bytes, true)
              and coalesce(pg_column_size(x.result) <= v_max_bytes, true)
            else false end as ok,
          -- the call's time, within what has passed since the claim, in whole milliseconds
          -- (the log entry's cost_ms; secs below is made from it, not floored again: 1.001 * 1000
          -- is 1000.99... in double precision)
          floor(least(greatest(coalesce(x.secs, v_ended), 0), v_ended) * 1000)::bigint as ms
        from unnest(p_shards, p_ids, p_claim_seqs, p_outcomes, p_results, p_stages, p_contexts, p_seconds)
          with ordinality as x(shard, id, claim_seq, outcome, result, stage, context, secs, n)
      ), changed as (
        update asyncflow.%2$I t set
          status = case when not r.ok then 'running' when r.outcome = 'succeed' then 'succeeded'
            else 'pending' end::asyncflow.task_status,
          -- an advance leaves no owner, as its report would have
          owner = case when r.ok and r.outcome = 'advance' then null else p_owner end,
          attempt = case when r.ok and r.outcome = 'advance' then 0 else t.attempt + 1 end,
          claim_seq = t.claim_seq + 1, claimed_at = v_claimed_at,
          lease_until = case when not r.ok then v_lease_until end,
          stage = case when r.ok and r.outcome = 'advance' then r.stage else t.stage end,
          context = case when r.ok and r.outcome = 'advance' then coalesce(r.context, t.context) else t.context end,
          order_time = case when r.ok and r.outcome = 'advance'
            then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) - make_interval(secs => t.priority)
            else t.order_time end,
          -- the entry report_tasks writes for an advance; a success's is made from the row when read
          schedule_log = case when r.ok and r.outcome = 'advance'
            then asyncflow.append_log(t.schedule_log, jsonb_build_object('worker', p_owner, 'stage', t.stage,
              'attempt', t.attempt + 1, 'start', v_claimed_at, 'cost_ms', r.ms,
              'outcome', 'advance'))
            else t.schedule_log end,
          result = case when r.ok and r.outcome = 'succeed' then coalesce(r.result, '{}'::jsonb) else t.result end,
          finished_at = case when r.ok and r.outcome = 'succeed'
            then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) else t.finished_at end,
          updated_at = case when r.ok then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) else v_claimed_at end
        from r
        where t.shard = r.shard and t.id = r.id
          -- status compared as text: the ready index must not look like a way in
          and t.status::text = 'pending' and t.claim_seq + 1 = r.claim_seq and t.xmax = v_xid
        -- the stage the call ran: an advance's is in the entry just written
        returning r.n, t.status, t.lease_until, r.ok, r.ms / 1000.0::float8 as secs,
          case when r.ok and r.outcome = 'advance' then t.schedule_log -> -1 ->> 'stage' else t.stage end as stage
      ), counted as (
        insert into asyncflow.type_counters as k (task_type, slot, claimed, succeeded)
        select v_task_type, pg_backend_pid() %% 16, count(*), count(*) filter (where c.status = 'succeeded')
        from changed c having count(*) > 0
        on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed,
          succeeded = k.succeeded + excluded.succeeded
      ), per_bucket as (
        -- the calls whose replies were written into the stage-time histogram, as type_report__ does
        select c.stage, d.k, count(*) as n, sum(c.secs) as secs
        from changed c
        cross join lateral (select width_bucket(c.secs, asyncflow.stage_time_bounds())
          - (c.secs = any (asyncflow.stage_time_bounds()))::integer as k) d
        where c.ok
        group by c.stage, d.k
      ), timed as (
        insert into asyncflow.stage_times as s (task_type, stage, slot, calls, seconds, buckets)
        select v_task_type, t.stage, pg_backend_pid() %% 16, sum(coalesce(g.n, 0)), sum(coalesce(g.secs, 0)),
          array_agg(coalesce(g.n, 0) order by x.k)
        from (select distinct stage from per_bucket) t
        cross join generate_series(0, cardinality(asyncflow.stage_time_bounds())) x(k)
        left join per_bucket g on g.stage = t.stage and g.k = x.k
        group by t.stage
        on conflict (task_type, stage, slot) do update set calls = s.calls + excluded.calls,
          seconds = s.seconds + excluded.seconds,
          buckets = array(select a + b from unnest(s.buckets, excluded.buckets) with ordinality u(a, b, i) order by i)
      )
      select r.n, asyncflow.format_task_id(v_task_type, r.shard, r.id), c.n is not null,
        case when c.n is null then (select s.status from asyncflow.%2$I s where s.shard = r.shard and s.id = r.id)
          else c.status end,
        c.lease_until
      from r
      left join changed c on c.n = r.n
      where c.n is null or (r.outcome is not null and not r.ok)
      order by r.n;
      -- Tasks that went on to their next stage are ready for any worker of the type (one NOTIFY).
      if array_position(p_outcomes, 'advance') is not null then
        perform asyncflow.wake(v_task_type);
      end if;
    end
    $body$
    $f$, v_finish, 'tasks_' || p_task_type, p_task_type);
  -- The finish as V22 had it (done instead of outcomes; done is 'succeed'), for the workers of
  -- the version before still running while the database is migrated: without it their every
  -- hold would fail (42883) and roll back until they were restarted.
  execute format($f$
    create or replace function asyncflow.%1$I(p_owner text, p_shards integer[], p_ids bigint[],
      p_claim_seqs integer[], p_done boolean[], p_results jsonb[], p_seconds double precision[])
    returns table (n bigint, task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
    language sql set search_path = pg_catalog, pg_temp as $body$
      select * from asyncflow.%1$I(p_owner, p_shards, p_ids, p_claim_seqs,
        array(select case when u.done then 'succeed' end from unnest(p_done) with ordinality u(done, i) order by u.i),
        p_results, array_fill(null::text, array[coalesce(cardinality(p_ids), 0)]),
        array_fill(null::jsonb, array[coalesce(cardinality(p_ids), 0)]), p_seconds)
    $body$
    $f$, v_finish);
  execute format('revoke all on function asyncflow.%I(text, integer) from public', v_hold);
  execute format('grant execute on function asyncflow.%I(text, integer) to asyncflow_worker', v_hold);
  execute format('revoke all on function asyncflow.%I(text, integer[], bigint[], integer[], text[], jsonb[], text[], '
    'jsonb[], double precision[]) from public', v_finish);
  execute format('grant execute on function asyncflow.%I(text, integer[], bigint[], integer[], text[], jsonb[], text[], '
    'jsonb[], double precision[]) to asyncflow_worker', v_finish);
  execute format('revoke all on function asyncflow.%I(text, integer[], bigint[], integer[], boolean[], jsonb[], '
    'double precision[]) from public', v_finish);
  execute format('grant execute on function asyncflow.%I(text, integer[], bigint[], integer[], boolean[], jsonb[], '
    'double precision[]) to asyncflow_worker', v_finish);
end
$fn$;

select asyncflow.create_claim_function(task_type), asyncflow.create_hold_functions(task_type) from asyncflow.task_types;
