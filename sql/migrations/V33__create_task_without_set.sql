-- V33: create_task's common case runs without a SET clause: about 5 % more create_task per second.
--
-- (asyncflow bench --only insert,enqueue,parts, three runs of the code before and after in turn
-- on the embedded server: create_task / INSERT 0.645, 0.681, 0.635 before; 0.645, 0.710, 0.701
-- after.)
--
-- A function's SET clause (create_task had SET search_path) costs each call the save of the
-- setting, the new search path worked out, and at the end a pass over every setting of the
-- server (AtEOXact_GUC) to put it back. Per create_task transaction from 8 connections that was
-- about 13 µs of 160 in all (pgbench and the machine's busy time, by hand), the largest single
-- part of what create_task costs beyond its task row.
--
-- Without the SET the function runs under the caller's search_path, so a SECURITY DEFINER body
-- must not let a name be found there: a caller that put its own schema before pg_catalog could
-- otherwise have its own "=" or jsonb_typeof run with the owner's rights. The new create_task
-- therefore names everything it uses by its schema: functions as pg_catalog.f(), operators as
-- OPERATOR(pg_catalog.=), types as pg_catalog.t or by their SQL keywords (integer, bigint,
-- timestamp with time zone, which are not looked up), tables as asyncflow.t. It avoids the
-- constructs that look an operator up by name behind the caller's back (IN, BETWEEN, NULLIF,
-- CASE x WHEN) and calls no function of ours that has no SET clause of its own (the body of such
-- a function is read under the caller's search_path too). The test suite calls it with a
-- search_path whose first schema defines every operator and function it uses, each of which
-- raises: none may be reached.
--
-- Everything else (an idempotency key, a type without its enqueue_info row, any argument that
-- fails a check, so every error) goes to create_task_general: the former create_task without its
-- direct path, still with SET search_path, and private (no grant): create_task calls it with the
-- owner's rights.

CREATE FUNCTION asyncflow.create_task_general(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
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
    end if;
    select end_pos into v_pos from asyncflow.positions p where p.task_type = create_task_general.task_type;
    v_id := nextval(v_type.id_seq);
    insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
      max_retry_interval, order_time, user_id, context, created_at, updated_at)
    values (create_task_general.task_type, v_pos, v_id, coalesce(stage, v_type.initial_stage), 'pending', coalesce(priority, 0),
      v_type.max_retry_num, v_type.max_retry_interval,
      coalesce(run_at, v_now) - make_interval(secs => coalesce(priority, 0)),
      user_id, coalesce(nullif(context, 'null'::jsonb), '{}'::jsonb), v_now, v_now);
    perform asyncflow.wake(create_task_general.task_type);
    return asyncflow.format_task_id(create_task_general.task_type, v_pos, v_id);
  end if;

  v_task := jsonb_build_object('context', coalesce(context, '{}'::jsonb), 'priority', coalesce(priority, 0));
  if run_at is not null then v_task := v_task || jsonb_build_object('run_at', run_at); end if;
  if stage is not null then v_task := v_task || jsonb_build_object('stage', stage); end if;
  if idempotency_key is not null then v_task := v_task || jsonb_build_object('idempotency_key', idempotency_key); end if;
  if user_id is not null then v_task := v_task || jsonb_build_object('user_id', user_id); end if;
  return (asyncflow.insert_tasks(task_type, jsonb_build_array(v_task), p_now, true))[1];
end
$_$;
REVOKE ALL ON FUNCTION asyncflow.create_task_general(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone) FROM PUBLIC;

-- Replaced in place (its grants kept); CREATE OR REPLACE sets the function's SET list anew, to none.
CREATE OR REPLACE FUNCTION asyncflow.create_task(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
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
  if idempotency_key is null then
    -- What the checks and the row need, in one read of enqueue_info (V25); the checks in one
    -- expression, the same as create_task_general's; the wake written out (asyncflow.wake's
    -- try-lock and NOTIFY).
    select e.end_pos, e.id_seq, e.initial_stage, e.max_retry_num, e.max_retry_interval, e.max_context_bytes
      into v_pos, v_seq, v_initial_stage, v_retry_num, v_retry_interval, v_max_bytes
      from asyncflow.enqueue_info e where e.task_type operator(pg_catalog.=) create_task.task_type;
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
      and coalesce(pg_catalog.length(user_id) operator(pg_catalog.<=) 255, true) then
      v_id := pg_catalog.nextval(v_seq);
      insert into asyncflow.tasks (task_type, shard, id, stage, status, priority, max_retry_num,
        max_retry_interval, order_time, user_id, context, created_at, updated_at)
      values (create_task.task_type, v_pos, v_id, coalesce(stage, v_initial_stage), 'pending',
        coalesce(priority, 0), v_retry_num, v_retry_interval,
        coalesce(run_at, v_now) operator(pg_catalog.-) pg_catalog.make_interval(secs => coalesce(priority, 0)),
        user_id,
        case when context operator(pg_catalog.=) 'null'::pg_catalog.jsonb then '{}'::pg_catalog.jsonb
          else coalesce(context, '{}'::pg_catalog.jsonb) end,
        v_now, v_now);
      if pg_catalog.pg_try_advisory_xact_lock(16712, pg_catalog.hashtext(create_task.task_type)) then
        perform pg_catalog.pg_notify('asyncflow', create_task.task_type);
      end if;
      -- asyncflow.format_task_id, written out (its body would be read under the caller's path)
      return create_task.task_type operator(pg_catalog.||) '-' operator(pg_catalog.||) v_pos::pg_catalog.text
        operator(pg_catalog.||) '-' operator(pg_catalog.||) v_id::pg_catalog.text;
    end if;
  end if;
  return asyncflow.create_task_general(create_task.task_type, context, priority, run_at, stage,
    idempotency_key, user_id, p_now);
end
$_$;

