-- Task types: registration and settings, shards of a type, queue keys' limits, the enqueue row.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

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
      ('queue_concurrency', 'int_or_null', 1, 1000000),
      ('speculative_chaining', 'bool', null, null)
    ) s(key, kind, lo, hi) where s.key = v_key;
    if not found then
      perform asyncflow.raise_error('AF006', format('unknown setting %L (known: schedule_limit, schedule_interval, '
        'max_processing_time, max_retry_num, max_retry_interval, shard_max_rows, retention, concurrency, '
        'initial_stage, paused, fair_queues, queue_concurrency, speculative_chaining)', v_key));
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
    'speculative_chaining', p.speculative_chaining,
    -- the rate limits (56_rate_limits.sql), read only for a type that has one: the type's, the
    -- one for every queue key, and the keys' own ({key: {max_starts, period}})
    'rate_limit', (select jsonb_build_object('max_starts', r.max_starts, 'period', r.period)
                   from asyncflow.rate_limits r where p.rate_limited and r.task_type = p.task_type),
    'queue_rate_limit', case when p.queue_max_starts is not null
      then jsonb_build_object('max_starts', p.queue_max_starts, 'period', p.queue_rate_period) end,
    'queue_rate_limits', (select jsonb_object_agg(r.queue_key,
                            jsonb_build_object('max_starts', r.max_starts, 'period', r.period))
                          from asyncflow.queue_rate_limits r
                          where p.queue_rate_limited and r.task_type = p.task_type and r.max_starts is not null),
    'created_at', p.created_at, 'updated_at', p.updated_at)
$$;

-- Creates the leaf table for one shard of a type and attaches it. The leaf is created on its own
-- and then attached: ATTACH takes SHARE UPDATE EXCLUSIVE on the parent, so inserts and claims of
-- the type go on meanwhile (CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE).
-- Identifiers are built only from a name that passed check_type_name, and quoted with %I.
create or replace function asyncflow.create_shard(p_task_type text, p_shard integer, p_now timestamptz) returns void
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

-- register_task_type: creates a type (sequence, table, indexes, first shard, positions row) or
-- changes its settings, fair_queues and queue_concurrency among them; the key indexes follow
-- fair_queues. Returns the type as JSON.
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
  -- A registration that changes nothing takes no lock and writes nothing: a worker registers its
  -- types at every start, and a fleet of hundreds starting at once queued on the type's row,
  -- each waiting for the commit of the one before (150 ms each for 200 workers through PgBouncer,
  -- a pooled connection held all the while). Each setting given is compared as JSON with the
  -- row's value; one that differs, or any other spelling of it (a string for a number), takes
  -- the path below, which writes it.
  select * into v_type from asyncflow.task_types y where y.task_type = p_task_type;
  if found and not exists (select 1 from jsonb_each(p_settings) s
                           where (to_jsonb(v_type) -> s.key) is distinct from s.value) then
    if p_settings ? 'fair_queues' then
      perform asyncflow.set_queue_indexes(p_task_type, v_type.fair_queues);
    end if;
    return asyncflow.task_type_json(v_type);
  end if;
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
    -- the task search's way to failed and cancelled tasks (find_tasks); `$` keeps the name out
    -- of the type names' space
    execute format('create index %I on asyncflow.%I (id) where status in (''failed'', ''cancelled'')',
      'tasks_' || p_task_type || '$failed_cancelled', 'tasks_' || p_task_type);
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
    speculative_chaining = coalesce((p_settings ->> 'speculative_chaining')::boolean, speculative_chaining),
    updated_at = v_now
  where task_type = p_task_type
  returning * into v_type;
  -- the key indexes follow fair_queues; the type's row is locked above, so two
  -- registrations never build or drop them at once
  if p_settings ? 'fair_queues' then
    perform asyncflow.set_queue_indexes(p_task_type, v_type.fair_queues);
  end if;
  return asyncflow.task_type_json(v_type);
end
$$;

-- The row of one type from the three tables (none while the type has no positions row, or the
-- config none). The type's row and the config's are locked FOR SHARE: a change to either that is
-- under way is waited for and then read (in READ COMMITTED a locked row is read again once its
-- writer commits), and one that starts later waits for this transaction, whose row its own
-- trigger then sees. Read without those locks, a settings change racing a shard roll, or a
-- config change racing a registration or a roll, could leave the row with the value the other
-- one replaces. The positions row is not locked: a roll holds it FOR UPDATE while
-- its trigger waits for the type's row, which a settings change holds while its trigger runs.
create or replace function asyncflow.refresh_enqueue_info(p_task_type text) returns void
language sql security definer set search_path = pg_catalog, pg_temp as $$
  insert into asyncflow.enqueue_info as e (task_type, end_pos, id_seq, initial_stage, max_retry_num,
    max_retry_interval, max_context_bytes)
  select y.task_type, p.end_pos, y.id_seq, y.initial_stage, y.max_retry_num, y.max_retry_interval,
    c.max_context_bytes
  from asyncflow.task_types y
  join asyncflow.positions p on p.task_type = y.task_type
  cross join asyncflow.config c
  where y.task_type = p_task_type
  for share of y, c
  on conflict (task_type) do update set end_pos = excluded.end_pos, id_seq = excluded.id_seq,
    initial_stage = excluded.initial_stage, max_retry_num = excluded.max_retry_num,
    max_retry_interval = excluded.max_retry_interval, max_context_bytes = excluded.max_context_bytes
$$;

-- Definer rights: whoever may change a type's settings or the config need not be able to write
-- enqueue_info. A change to the config (any statement, TRUNCATE included) makes every row anew
-- (none while the config is empty: create_task then takes the path that reads the tables); a
-- positions row deleted takes its type's row with it.
create or replace function asyncflow.tg_enqueue_info() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  if tg_table_name = 'config' then
    delete from asyncflow.enqueue_info;
    perform asyncflow.refresh_enqueue_info(y.task_type) from asyncflow.task_types y;
  elsif tg_level = 'STATEMENT' then
    delete from asyncflow.enqueue_info e
    where not exists (select 1 from asyncflow.positions p where p.task_type = e.task_type);
  else
    perform asyncflow.refresh_enqueue_info(new.task_type);
  end if;
  return null;
end
$$;

create or replace function asyncflow.tg_task_types__resumed() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform asyncflow.wake(new.task_type);
  return null;
end
$$;

-- Creates or drops the type's key indexes to match fair_queues; when they already match, takes
-- no lock (a worker registers its types at every start). Identifiers from a checked type name,
-- quoted with %I.
create or replace function asyncflow.set_queue_indexes(p_task_type text, p_on boolean) returns void
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

-- Sets (or with a null concurrency removes) one key's own limit; returns the limit that now
-- applies to the key (its own, else the type's queue_concurrency; null: none). The key as in
-- create_task, or '' for the tasks without one. Only for a type with fair_queues (no other claim
-- reads it). Setting a limit above 0 or removing one wakes the type's workers. Errors: AF001,
-- AF003, AF006.
create or replace function asyncflow.set_queue_limit(p_task_type text, p_queue_key text, p_concurrency integer)
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
