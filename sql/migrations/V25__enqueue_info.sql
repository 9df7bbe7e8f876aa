-- create_task reads one row where it read three: asyncflow.enqueue_info holds what it needs of a
-- type (its newest shard, id sequence, initial stage, retry settings, and the context limit).
--
-- Each table a statement reads costs a transaction about 25,000 instructions on this server
-- (its lock, the start of its scan, the index opened), however small the table: create_task read
-- task_types, positions and config before its insert, about a quarter of the 317,000
-- instructions of a create_task transaction (callgrind, one client, per transaction: the
-- baseline's one-row INSERT is 53,000, the task row alone 131,000). With the one row, the checks
-- in one expression and the wake written out, it is 265,000, and create_task one per transaction
-- from 8 connections goes about 12 % faster (pgbench, by hand).
--
-- The row is kept by triggers on the three tables, in the transaction that changes them
-- (register_task_type and settings changes, a roll to a new shard, a new max_context_bytes), so
-- create_task sees the values it saw before, at the same moment. If the row were missing,
-- create_task takes the path it took before (reading the three tables), which is also the path
-- that raises its errors.
create table asyncflow.enqueue_info (
  task_type text primary key references asyncflow.task_types on delete cascade,
  end_pos integer not null,
  id_seq regclass not null,
  initial_stage text not null,
  max_retry_num integer not null,
  max_retry_interval integer not null,
  max_context_bytes integer not null
);

-- The row of one type from the three tables (none while the type has no positions row, or the
-- config none). The type's row and the config's are locked FOR SHARE: a change to either that is
-- under way is waited for and then read (in READ COMMITTED a locked row is read again once its
-- writer commits), and one that starts later waits for this transaction, whose row its own
-- trigger then sees. Read without those locks, a settings change racing a shard roll, or a
-- config change racing a registration or a roll, left the row with the value the other one
-- replaced (found by review). The positions row is not locked: a roll holds it FOR UPDATE while
-- its trigger waits for the type's row, which a settings change holds while its trigger runs.
create function asyncflow.refresh_enqueue_info(p_task_type text) returns void
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
revoke all on function asyncflow.refresh_enqueue_info(text) from public;

-- Definer rights: whoever may change a type's settings or the config need not be able to write
-- enqueue_info. A change to the config (any statement, TRUNCATE included) makes every row anew
-- (none while the config is empty: create_task then takes the path that reads the tables); a
-- positions row deleted takes its type's row with it.
create function asyncflow.tg_enqueue_info() returns trigger
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
revoke all on function asyncflow.tg_enqueue_info() from public;

create trigger tg_task_types__enqueue_info after insert or update on asyncflow.task_types
  for each row execute function asyncflow.tg_enqueue_info();
create trigger tg_positions__enqueue_info after insert or update of end_pos on asyncflow.positions
  for each row execute function asyncflow.tg_enqueue_info();
create trigger tg_positions__enqueue_info_gone after delete or truncate on asyncflow.positions
  for each statement execute function asyncflow.tg_enqueue_info();
create trigger tg_config__enqueue_info after insert or update or delete or truncate on asyncflow.config
  for each statement execute function asyncflow.tg_enqueue_info();

select asyncflow.refresh_enqueue_info(task_type) from asyncflow.task_types;

-- create_task (V4) with the direct path above; replaced whole (the migration convention), the
-- V4 steps unchanged below it.
-- create_task: one task; returns its id (the existing task's id when the idempotency key is known).
create or replace function asyncflow.create_task(
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
  v_seq regclass;
  v_initial_stage text;
  v_retry_num integer;
  v_retry_interval integer;
begin
  -- The common case (no idempotency key) takes a direct path: the same checks and errors as
  -- insert_tasks, then one INSERT ... VALUES; about four times the rate of the general path.
  if idempotency_key is null then
    -- Faster still (V25): what the checks and the row need in one read of enqueue_info, the
    -- checks in one expression, and the wake written out (asyncflow.wake's try-lock and NOTIFY)
    -- rather than called. When the type has no row there or an argument fails a check, the
    -- steps below run as before, and raise the error they always raised.
    select e.end_pos, e.id_seq, e.initial_stage, e.max_retry_num, e.max_retry_interval, e.max_context_bytes
      into v_pos, v_seq, v_initial_stage, v_retry_num, v_retry_interval, v_max_bytes
      from asyncflow.enqueue_info e where e.task_type = create_task.task_type;
    if found and (context is null or jsonb_typeof(context) in ('object', 'null'))
      and (priority is null or priority between 0 and 31104000)
      and coalesce(pg_column_size(context) <= v_max_bytes, true)
      and (run_at is null or run_at between '4713-11-24 00:00:00+00 BC' and 'infinity' and isfinite(run_at))
      and (stage is null or stage ~ '^[A-Za-z0-9_.:/-]{1,64}$')
      and coalesce(length(user_id) <= 255, true) then
      v_id := nextval(v_seq);
      insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
        max_retry_interval, order_time, user_id, context, created_at, updated_at)
      values (create_task.task_type, v_pos, v_id, coalesce(stage, v_initial_stage), 'pending',
        coalesce(priority, 0), v_retry_num, v_retry_interval,
        coalesce(run_at, v_now) - make_interval(secs => coalesce(priority, 0)),
        user_id, coalesce(nullif(context, 'null'::jsonb), '{}'::jsonb), v_now, v_now);
      if pg_try_advisory_xact_lock(16712, hashtext(create_task.task_type)) then
        perform pg_notify('asyncflow', create_task.task_type);
      end if;
      return asyncflow.format_task_id(create_task.task_type, v_pos, v_id);
    end if;
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
    elsif run_at is not null and (not isfinite(run_at) or run_at < '4713-11-24 00:00:00+00 BC') then
      -- (V26) a year after the earliest timestamp: run_at less the priority must be one too
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
