-- Enqueue: create_task (the common case, without a SET clause) and create_tasks (bulk).
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- enqueue_task_type: the row of the type an enqueue names. A type nothing has registered yet is
-- registered here, with the default settings (as River and Oban take any kind): an application
-- may be deployed before its workers, whose function.toml then sets the settings (those copied
-- onto a task at enqueue, initial_stage and the retry policy, stay as they were for the tasks
-- already queued). A name that breaks the type name rule is refused (AF003) and nothing changes.
-- Called by the enqueue functions, which run as the schema's owner (security definer), so an
-- application's role needs no right to create tables.
create or replace function asyncflow.enqueue_task_type(p_task_type text) returns asyncflow.task_types
language plpgsql set search_path = pg_catalog, pg_temp as $$
declare
  v_type asyncflow.task_types;
begin
  select * into v_type from asyncflow.task_types y where y.task_type = p_task_type;
  if not found then
    perform asyncflow.register_task_type(p_task_type, '{}');
    select * into v_type from asyncflow.task_types y where y.task_type = p_task_type;
  end if;
  return v_type;
end
$$;

-- insert_tasks: the tasks of one type from a JSON array of objects (context, priority, run_at,
-- stage, idempotency_key, user_id, queue_key, traceparent, debounce_key, debounce_for in seconds), checked and then inserted in one statement. Returns
-- their ids in input order; an idempotency key already taken gives that key's task id. With
-- p_single (create_task's one task) an error does not name the element.
create or replace function asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamp with time zone, p_single boolean) returns text[]
    language plpgsql
    as $_$
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
  v_type := asyncflow.enqueue_task_type(p_task_type);
  if p_tasks is null or jsonb_typeof(p_tasks) <> 'array' then
    perform asyncflow.raise_error('AF006', 'tasks must be a JSON array of objects');
  end if;
  select max_context_bytes into v_max_bytes from asyncflow.config;

  -- Anything that could be wrong? One scan of the elements (an error in it counts as "maybe").
  -- A debounce always counts as "maybe": its fields go together, which the element-by-element
  -- check sees.
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
          || (@.traceparent.type() != "null" && (@.traceparent.type() != "string"
              || !(@.traceparent like_regex "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
              || @.traceparent like_regex "^00-0{32}-" || @.traceparent like_regex "^00-.{32}-0{16}-"))
          || exists(@.keyvalue() ? (@.key != "context" && @.key != "priority" && @.key != "run_at"
              && @.key != "stage" && @.key != "idempotency_key" && @.key != "user_id"
              && @.key != "queue_key" && @.key != "traceparent" && @.key != "debounce_key"
              && @.key != "debounce_for"))
          || exists(@.debounce_key) || exists(@.debounce_for))', silent => true), true)
    -- the JSON rule (asyncflow.json_ok) for every context, in strict mode: lax would unwrap
    -- arrays and count their levels wrong (an element without a context is false here)
    or coalesce(jsonb_path_exists(p_tasks, 'strict $[*] ? (exists(@.context.**{64} ? (@.type() == "object"
          || @.type() == "array")) || exists(@.context.** ? (@.abs() > 1e308)))', silent => true), true)
  then
    select n, left(problem, 5) as code, substr(problem, 6) as why into v_bad from (
      select n, case
        when jsonb_typeof(e) <> 'object' then 'AF006must be a JSON object'
        when exists (select 1 from jsonb_object_keys(e) k
                     where k not in ('context', 'priority', 'run_at', 'stage', 'idempotency_key', 'user_id', 'queue_key', 'traceparent',
                       'debounce_key', 'debounce_for'))
          then 'AF006' || format('has unknown field %L (known: context, priority, run_at, stage, idempotency_key, user_id, queue_key, traceparent, debounce_key, debounce_for)',
            (select k from jsonb_object_keys(e) k
             where k not in ('context', 'priority', 'run_at', 'stage', 'idempotency_key', 'user_id', 'queue_key', 'traceparent',
               'debounce_key', 'debounce_for') limit 1))
        when jsonb_typeof(e -> 'context') not in ('object', 'null') then 'AF006context must be a JSON object'
        when jsonb_typeof(e -> 'priority') not in ('number', 'null')
          or (jsonb_typeof(e -> 'priority') = 'number'
              and ((e ->> 'priority')::numeric <> trunc((e ->> 'priority')::numeric)
                   or (e ->> 'priority')::numeric not between 0 and 31104000))
          then 'AF004' || format('priority must be an integer between 0 and 31104000 (seconds ahead), got %s', e -> 'priority')
        when pg_column_size(e -> 'context') > v_max_bytes
          then 'AF005' || format('context is too large: %s bytes, the limit is %s (asyncflow.config.max_context_bytes)',
            pg_column_size(e -> 'context'), v_max_bytes)
        -- '.<field>: ...' names the field after the element: tasks[3].context: ...
        when not asyncflow.json_ok(e -> 'context')
          then 'AF006' || format('.context: %s', asyncflow.json_problem(e -> 'context'))
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
        when jsonb_typeof(e -> 'traceparent') not in ('string', 'null') or not asyncflow.traceparent_ok(e ->> 'traceparent')
          then 'AF006' || format('traceparent must be a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros), got %s',
            e -> 'traceparent')
        when jsonb_typeof(e -> 'debounce_key') not in ('string', 'null') or length(e ->> 'debounce_key') not between 1 and 255
          then 'AF006' || format('debounce_key must be a string of 1 to 255 characters, got %s', e -> 'debounce_key')
        when jsonb_typeof(e -> 'debounce_for') not in ('number', 'null')
          or (jsonb_typeof(e -> 'debounce_for') = 'number'
              and ((e ->> 'debounce_for')::numeric <= 0 or (e ->> 'debounce_for')::numeric > 31536000))
          then 'AF006' || format('debounce_for must be a number of seconds more than 0 and at most 31536000, got %s', e -> 'debounce_for')
        when (e ->> 'debounce_key') is null and (e ->> 'debounce_for') is not null
          then 'AF006debounce_for needs a debounce_key'
        when (e ->> 'debounce_key') is not null and (e ->> 'debounce_for') is null
          then 'AF006debounce_key needs debounce_for (how long to wait for the next create with the key)'
        when (e ->> 'debounce_key') is not null and (e ->> 'idempotency_key') is not null
          then 'AF006debounce_key cannot be combined with idempotency_key or unique_key'
        when (e ->> 'debounce_key') is not null and coalesce((e ->> 'priority')::numeric, 0) <> 0
          then 'AF006priority cannot be combined with debounce_key: a debounced task starts once its debounce_for has passed'
      end as problem
      from jsonb_array_elements(p_tasks) with ordinality x(e, n)
    ) checked where problem is not null order by n limit 1;
    if found then
      perform asyncflow.raise_error(v_bad.code, case
        when p_single then ltrim(v_bad.why, '.')
        when v_bad.why like '.%' then format('tasks[%s]%s', v_bad.n - 1, v_bad.why)
        else format('tasks[%s]: %s', v_bad.n - 1, v_bad.why) end);
    end if;
  end if;

  -- With a debounce key anywhere: every element on its own, in order, through create_task_debounced
  -- (or create_task_general), which takes each key's lock.
  if jsonb_path_exists(p_tasks, '$[*].debounce_key ? (@.type() == "string")') then
    select array_agg(case when x.e ? 'debounce_key' and jsonb_typeof(x.e -> 'debounce_key') = 'string'
        then asyncflow.create_task_debounced(p_task_type, x.e -> 'context', null, (x.e ->> 'run_at')::timestamptz,
          x.e ->> 'stage', x.e ->> 'user_id', p_now, x.e ->> 'queue_key', x.e ->> 'traceparent', x.e ->> 'debounce_key',
          make_interval(secs => (x.e ->> 'debounce_for')::float8))
        else asyncflow.create_task_general(p_task_type, x.e -> 'context', (x.e ->> 'priority')::integer,
          (x.e ->> 'run_at')::timestamptz, x.e ->> 'stage', x.e ->> 'idempotency_key', x.e ->> 'user_id', p_now,
          x.e ->> 'queue_key', traceparent => x.e ->> 'traceparent') end order by x.n)
      into v_ids
    from jsonb_array_elements(p_tasks) with ordinality x(e, n);
    return coalesce(v_ids, '{}');
  end if;

  select end_pos into v_pos from asyncflow.positions where task_type = p_task_type;
  if not coalesce(jsonb_path_exists(p_tasks, '$[*].idempotency_key ? (@.type() != "null")', silent => true), true) then
    -- rows come out of jsonb_to_recordset in array order and take their ids in that order, so
    -- ordering the ids orders them as the input
    with inserted as (
      insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
        max_retry_interval, order_time, user_id, queue_key, traceparent, context, created_at, updated_at)
      select p_task_type, v_pos, nextval(v_type.id_seq), coalesce(x.stage, v_type.initial_stage), 'pending',
        coalesce(x.priority, 0)::integer, v_type.max_retry_num, v_type.max_retry_interval,
        coalesce(x.run_at, v_now) - coalesce(x.priority, 0) * interval '1 second',
        x.user_id, x.queue_key, x.traceparent, coalesce(nullif(x.context, 'null'::jsonb), '{}'::jsonb), v_now, v_now
      from jsonb_to_recordset(p_tasks) as x(context jsonb, priority numeric, run_at timestamptz, stage text, user_id text,
        queue_key text, traceparent text)
      returning id
    )
    select array_agg(asyncflow.format_task_id(p_task_type, v_pos, i.id) order by i.id) into v_ids from inserted i;
    if cardinality(v_ids) > 0 then
      insert into asyncflow.status_deltas (task_type, in_pending) values (p_task_type, cardinality(v_ids));
    end if;
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
      max_retry_interval, order_time, user_id, queue_key, traceparent, idempotency_key, context, created_at, updated_at)
    select p_task_type, v_pos, i.id, coalesce(i.e ->> 'stage', v_type.initial_stage), 'pending', i.priority,
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce((i.e ->> 'run_at')::timestamptz, v_now) - make_interval(secs => i.priority),
      i.e ->> 'user_id', i.e ->> 'queue_key', i.e ->> 'traceparent', i.ikey, coalesce(nullif(i.e -> 'context', 'null'::jsonb), '{}'::jsonb), v_now, v_now
    from input i
    where i.ikey is null or i.id in (select id from fresh_keys)
    returning id
  ), counted as (
    insert into asyncflow.status_deltas (task_type, in_pending)
    select p_task_type, count(*) from inserted having count(*) > 0
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

create or replace function asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone default null::timestamp with time zone) returns setof text
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $_$
declare
  v_n bigint;
begin
  perform asyncflow.check_now(p_now);
  if jsonb_typeof(tasks) = 'array' and jsonb_path_exists(tasks, 'strict $[*] ? (@.type() != "object")') then
    select x.n into v_n from jsonb_array_elements(tasks) with ordinality x(e, n)
    where jsonb_typeof(x.e) <> 'object' order by x.n limit 1;
    perform asyncflow.raise_error('AF006', format('tasks[%s]: must be a JSON object', v_n - 1));
  end if;
  -- insert_tasks gets the default collation, not the caller's (see create_task)
  return query select unnest(asyncflow.insert_tasks(task_type collate "default", tasks, p_now, false));
end
$_$;

create or replace function asyncflow.create_task(task_type text, context jsonb default '{}'::jsonb, priority integer default 0, run_at timestamp with time zone default null::timestamp with time zone, stage text default null::text, idempotency_key text default null::text, user_id text default null::text, p_now timestamp with time zone default null::timestamp with time zone, queue_key text default null::text, unique_key text default null::text, unique_for integer default null::integer, traceparent text default null::text, debounce_key text default null::text, debounce_for interval default null::interval) returns text
    language plpgsql security definer
    as $_$
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
  -- No SET search_path: a SET clause costs every call (about 5 % of create_task's rate), so the
  -- body runs under the caller's search_path, and every name below is schema-qualified,
  -- operators included (a caller's own "=" must never run with the owner's rights).
  -- And no comparison takes the caller's collation: a plpgsql function's text parameters
  -- take the collation of the call's arguments, and under a nondeterministic one of the
  -- caller's (CREATE COLLATION needs no privilege) 'a_b' = 'ab', so the lookup would find
  -- another type's row.
  if idempotency_key is null and unique_key is null and debounce_key is null and debounce_for is null then
    -- What the checks and the row need, in one read of enqueue_info (one table, not task_types,
    -- positions and config: each table read costs a transaction about 25,000 instructions); the
    -- checks in one expression, the same as create_task_general's; the wake written out
    -- (asyncflow.wake's try-lock and NOTIFY).
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
        and pg_catalog.length(queue_key) operator(pg_catalog.<=) 255))
      -- inlined SQL, every name in them qualified: the JSON rule, the clock's range, the trace context
      and asyncflow.traceparent_ok(traceparent)
      and asyncflow.json_ok(context)
      and asyncflow.now_ok(p_now) then
      v_id := pg_catalog.nextval(v_seq);
      insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
        max_retry_interval, order_time, user_id, queue_key, traceparent, context, created_at, updated_at)
      values (create_task.task_type, v_pos, v_id, coalesce(stage, v_initial_stage), 'pending',
        coalesce(priority, 0), v_retry_num, v_retry_interval,
        coalesce(run_at, v_now) operator(pg_catalog.-) pg_catalog.make_interval(secs => coalesce(priority, 0)),
        user_id, queue_key, traceparent,
        case when context operator(pg_catalog.=) 'null'::pg_catalog.jsonb then '{}'::pg_catalog.jsonb
          else coalesce(context, '{}'::pg_catalog.jsonb) end,
        v_now, v_now);
      insert into asyncflow.status_deltas (task_type, in_pending) values (create_task.task_type, 1);
      if pg_catalog.pg_try_advisory_xact_lock(16712, pg_catalog.hashtext(create_task.task_type collate pg_catalog."default")) then
        perform pg_catalog.pg_notify('asyncflow', create_task.task_type);
      end if;
      -- asyncflow.format_task_id, written out (its body would be read under the caller's path)
      return create_task.task_type operator(pg_catalog.||) '-' operator(pg_catalog.||) v_pos::pg_catalog.text
        operator(pg_catalog.||) '-' operator(pg_catalog.||) v_id::pg_catalog.text;
    end if;
  end if;
  -- the explicit collation makes the call's, so every text parameter's, the default one
  return asyncflow.create_task_general(create_task.task_type collate pg_catalog."default", context, priority, run_at, stage,
    idempotency_key, user_id, p_now, queue_key, unique_key, unique_for, traceparent, debounce_key, debounce_for);
end
$_$;

create or replace function asyncflow.create_task_general(task_type text, context jsonb default '{}'::jsonb, priority integer default 0, run_at timestamp with time zone default null::timestamp with time zone, stage text default null::text, idempotency_key text default null::text, user_id text default null::text, p_now timestamp with time zone default null::timestamp with time zone, queue_key text default null::text, unique_key text default null::text, unique_for integer default null::integer, traceparent text default null::text, debounce_key text default null::text, debounce_for interval default null::interval) returns text
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $_$
declare
  v_task jsonb;
  v_type asyncflow.task_types;
  v_now timestamptz := asyncflow.check_now(p_now);
  v_pos integer;
  v_id bigint;
  v_unique asyncflow.unique_keys;
  v_key record;
  v_task_id text;
begin
  if debounce_key is not null or debounce_for is not null then
    if idempotency_key is not null or unique_key is not null then
      perform asyncflow.raise_error('AF006', 'debounce_key cannot be combined with idempotency_key or unique_key');
    end if;
    return asyncflow.create_task_debounced(create_task_general.task_type, context, priority, run_at, stage, user_id,
      p_now, queue_key, traceparent, debounce_key, debounce_for);
  end if;
  -- With a unique key: the key's newest task while it blocks (inside its window, or pending or
  -- running), else a new task that becomes the key's. The key's row is taken first (inserted,
  -- or locked): a concurrent call with the same key waits, then sees the task made here.
  if unique_key is not null then
    if length(unique_key) not between 1 and 255 then
      perform asyncflow.raise_error('AF006', 'unique_key must be a string of 1 to 255 characters');
    elsif unique_for is not null and unique_for not between 1 and 31536000 then
      perform asyncflow.raise_error('AF006', format('unique_for must be between 1 and 31536000 seconds, got %s', unique_for));
    end if;
    perform asyncflow.enqueue_task_type(create_task_general.task_type);
    insert into asyncflow.unique_keys (task_type, unique_key, shard, id, created_at, expires_at)
    values (create_task_general.task_type, unique_key, 0, 0, v_now, null)
    on conflict do nothing;
    if not found then
      select * into v_unique from asyncflow.unique_keys k
      where k.task_type = create_task_general.task_type and k.unique_key = create_task_general.unique_key for update;
      if (v_unique.expires_at is not null and v_unique.expires_at > v_now)
        or (v_unique.expires_at is null and exists (select 1 from asyncflow.tasks t
          where t.task_type = v_unique.task_type and t.shard = v_unique.shard and t.id = v_unique.id
            and t.status in ('pending', 'running', 'waiting'))) then
        return asyncflow.format_task_id(v_unique.task_type, v_unique.shard, v_unique.id);
      end if;
    end if;
    v_task_id := asyncflow.create_task_general(create_task_general.task_type, context, priority, run_at, stage,
      idempotency_key, user_id, p_now, queue_key, traceparent => traceparent);
    select * into v_key from asyncflow.parse_task_id(v_task_id);
    update asyncflow.unique_keys k set shard = v_key.shard, id = v_key.id, created_at = v_now,
      expires_at = v_now + make_interval(secs => unique_for)
    where k.task_type = create_task_general.task_type and k.unique_key = create_task_general.unique_key;
    return v_task_id;
  end if;
  -- Without an idempotency key: the checks, each with its error, then one INSERT ... VALUES.
  if idempotency_key is null then
    v_type := asyncflow.enqueue_task_type(create_task_general.task_type);
    perform asyncflow.check_new_task(context, priority, run_at, stage, user_id, queue_key, traceparent);
    select end_pos into v_pos from asyncflow.positions p where p.task_type = create_task_general.task_type;
    v_id := nextval(v_type.id_seq);
    insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
      max_retry_interval, order_time, user_id, queue_key, traceparent, context, created_at, updated_at)
    values (create_task_general.task_type, v_pos, v_id, coalesce(stage, v_type.initial_stage), 'pending', coalesce(priority, 0),
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce(run_at, v_now) - make_interval(secs => coalesce(priority, 0)),
      user_id, queue_key, traceparent, coalesce(nullif(context, 'null'::jsonb), '{}'::jsonb), v_now, v_now);
    insert into asyncflow.status_deltas (task_type, in_pending) values (create_task_general.task_type, 1);
    perform asyncflow.wake(create_task_general.task_type);
    return asyncflow.format_task_id(create_task_general.task_type, v_pos, v_id);
  end if;

  v_task := jsonb_build_object('context', coalesce(context, '{}'::jsonb), 'priority', coalesce(priority, 0));
  if run_at is not null then v_task := v_task || jsonb_build_object('run_at', run_at); end if;
  if stage is not null then v_task := v_task || jsonb_build_object('stage', stage); end if;
  if idempotency_key is not null then v_task := v_task || jsonb_build_object('idempotency_key', idempotency_key); end if;
  if user_id is not null then v_task := v_task || jsonb_build_object('user_id', user_id); end if;
  if queue_key is not null then v_task := v_task || jsonb_build_object('queue_key', queue_key); end if;
  if traceparent is not null then v_task := v_task || jsonb_build_object('traceparent', traceparent); end if;
  return (asyncflow.insert_tasks(task_type, jsonb_build_array(v_task), p_now, true))[1];
end
$_$;

-- check_context: raises what is wrong with a context's size (AF005, over max_context_bytes) or
-- with the JSON rule (AF006), and returns when nothing is (a null passes). Shared by
-- check_new_task and checkpoint_task.
create or replace function asyncflow.check_context(p_context jsonb) returns void
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
  v_max_bytes integer;
begin
  select max_context_bytes into v_max_bytes from asyncflow.config;
  if pg_column_size(p_context) > v_max_bytes then
    perform asyncflow.raise_error('AF005', format(
      'context is too large: %s bytes, the limit is %s (asyncflow.config.max_context_bytes)',
      pg_column_size(p_context), v_max_bytes));
  elsif not asyncflow.json_ok(p_context) then
    perform asyncflow.check_json(p_context, 'context');
  end if;
end
$$;

-- check_new_task: raises the first problem of a new task's fields (the error create_task gives),
-- and returns when there is none. Shared by create_task_general and create_task_debounced, whose
-- replace path writes a context without inserting a task.
create or replace function asyncflow.check_new_task(p_context jsonb, p_priority integer, p_run_at timestamptz,
  p_stage text, p_user_id text, p_queue_key text, p_traceparent text) returns void
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
begin
  if p_context is not null and jsonb_typeof(p_context) not in ('object', 'null') then
    perform asyncflow.raise_error('AF006', 'context must be a JSON object');
  elsif p_priority is not null and p_priority not between 0 and 31104000 then
    perform asyncflow.raise_error('AF004',
      format('priority must be an integer between 0 and 31104000 (seconds ahead), got %s', p_priority));
  end if;
  perform asyncflow.check_context(p_context);
  if p_run_at is not null and not p_run_at between '0002-01-01 00:00:00+00' and '9999-01-01 00:00:00+00' then
    -- years 2 to 9998: the task's times stay years 1 to 9999 in any time zone, which
    -- JSON readers of RFC 3339 can read (a year before 1 is written "... BC", which they cannot)
    perform asyncflow.raise_error('AF006', format('run_at must be a timestamp from 0002-01-01 to 9999-01-01 (UTC), got %s', p_run_at));
  elsif p_stage is not null and p_stage !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
    perform asyncflow.raise_error('AF006', format('stage must match ^[A-Za-z0-9_.:/-]{1,64}$, got %s', to_jsonb(p_stage)));
  elsif length(p_user_id) > 255 then
    perform asyncflow.raise_error('AF006',
      format('user_id must be a string of at most 255 characters, got %s', to_jsonb(p_user_id)));
  elsif length(p_queue_key) not between 1 and 255 then
    perform asyncflow.raise_error('AF006',
      format('queue_key must be a string of 1 to 255 characters, got %s', to_jsonb(p_queue_key)));
  elsif not asyncflow.traceparent_ok(p_traceparent) then
    perform asyncflow.raise_error('AF006', format(
      'traceparent must be a W3C trace p_context (00-<32 hex>-<16 hex>-<2 hex>, lowercase, ids not all zeros), got %s',
      to_jsonb(p_traceparent)));
  end if;end
$$;

-- create_task_debounced: create_task with a debounce_key and debounce_for. The task starts no
-- earlier than now + debounce_for (or run_at, when later). While the key's task is pending and
-- has never been claimed (claim_seq 0), another create with the key (of the same type) replaces
-- its context, moves its start to now + debounce_for and returns its id; once it has been
-- claimed, the create makes a new task, which the key names from then on.
-- Concurrent creates of one key run one at a time: each takes the key's row first (inserts it,
-- or waits for its lock), so 8 creators at once leave one task. The key's task is changed by an
-- UPDATE that waits for a claim holding the row and then looks at the row as that claim left
-- it, so a task is never both claimed and debounced. A replace is marked for task_created_here
-- (the transaction-local setting asyncflow.debounced, the task's id): the task row is this
-- transaction's then, though it did not create it. Errors (AF006): a key without debounce_for,
-- debounce_for without a key, a key not of 1 to 255 characters, debounce_for not more than 0 and
-- at most 365 days, a priority (it would start the task before its debounce ends), and the
-- errors of create_task; nothing changed.
create or replace function asyncflow.create_task_debounced(p_task_type text, p_context jsonb, p_priority integer,
  p_run_at timestamptz, p_stage text, p_user_id text, p_now timestamptz, p_queue_key text, p_traceparent text,
  p_debounce_key text, p_debounce_for interval) returns text
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_start timestamptz;
  v_row asyncflow.debounce_keys;
  v_task_id text;
  v_key record;
begin
  if p_debounce_key is null then
    perform asyncflow.raise_error('AF006', 'debounce_for needs a debounce_key');
  elsif length(p_debounce_key) not between 1 and 255 then
    perform asyncflow.raise_error('AF006',
      format('debounce_key must be a string of 1 to 255 characters, got %s', to_jsonb(p_debounce_key)));
  elsif p_debounce_for is null then
    perform asyncflow.raise_error('AF006', 'debounce_key needs debounce_for (how long to wait for the next create with the key)');
  elsif p_debounce_for <= interval '0' or p_debounce_for > interval '365 days' then
    perform asyncflow.raise_error('AF006',
      format('debounce_for must be more than 0 and at most 365 days, got %s', p_debounce_for));
  elsif coalesce(p_priority, 0) <> 0 then
    perform asyncflow.raise_error('AF006',
      'priority cannot be combined with debounce_key: a debounced task starts once its debounce_for has passed');
  end if;
  perform asyncflow.enqueue_task_type(p_task_type);
  perform asyncflow.check_new_task(p_context, 0, p_run_at, p_stage, p_user_id, p_queue_key, p_traceparent);
  v_start := greatest(v_now + p_debounce_for, p_run_at);
  perform set_config('asyncflow.debounced', '', true);

  insert into asyncflow.debounce_keys (task_type, debounce_key, shard, id, start_at)
  values (p_task_type, p_debounce_key, 0, 0, v_start)
  on conflict do nothing;
  if not found then
    select * into v_row from asyncflow.debounce_keys k
    where k.task_type = p_task_type and k.debounce_key = p_debounce_key for update;
    update asyncflow.tasks t set context = coalesce(nullif(p_context, 'null'::jsonb), '{}'::jsonb),
      order_time = v_start, updated_at = v_now
    where t.task_type = v_row.task_type and t.shard = v_row.shard and t.id = v_row.id
      and t.status = 'pending' and t.claim_seq = 0;
    if found then
      update asyncflow.debounce_keys k set start_at = v_start
      where k.task_type = p_task_type and k.debounce_key = p_debounce_key;
      v_task_id := asyncflow.format_task_id(v_row.task_type, v_row.shard, v_row.id);
      perform set_config('asyncflow.debounced', v_task_id, true);
      return v_task_id;
    end if;
  end if;
  v_task_id := asyncflow.create_task_general(p_task_type, p_context, 0, v_start, p_stage, null, p_user_id, p_now,
    p_queue_key, traceparent => p_traceparent);
  select * into v_key from asyncflow.parse_task_id(v_task_id);
  update asyncflow.debounce_keys k set shard = v_key.shard, id = v_key.id, start_at = v_start
  where k.task_type = p_task_type and k.debounce_key = p_debounce_key;
  return v_task_id;
end
$$;

-- task_created_here: whether the task p_task_id was created by the calling transaction (its row
-- is this transaction's own): how a create_task with an idempotency key tells a new task from
-- the one its key already named, or a debounced create from the task it replaced (the row is
-- this transaction's then too: create_task_debounced marks it). False for an unknown id.
create or replace function asyncflow.task_created_here(p_task_id text) returns boolean
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_key record;
  v_xmin xid;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null or current_setting('asyncflow.debounced', true) = p_task_id then
    return false;
  end if;
  select t.xmin into v_xmin from asyncflow.tasks t
  where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id;
  return coalesce(v_xmin = pg_current_xact_id_if_assigned()::text::xid, false);
end
$$;
