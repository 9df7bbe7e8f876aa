-- V38: review fixes.
--
-- 1. create_task and create_tasks compared the caller's task type under the caller's collation.
--    A plpgsql function's text parameters take the collation of the arguments it is called with
--    (`asyncflow.create_task('a_b' collate mine.ign)`), and a role that may create in a schema of
--    its own may CREATE COLLATION there, nondeterministic ones included: under ICU's
--    'und-u-ka-shifted' punctuation is ignored, so 'a_b' = 'ab'. enqueue_info (create_task)
--    and task_types (create_task_general, insert_tasks) then gave back another type's row: a task
--    of type a_b written with ab's shard, id sequence, initial stage and retry policy, and the
--    ids it took from ab's sequence later refused to a_b's own creates as duplicate keys. Both
--    now name the default collation explicitly where they take the type: an explicit collation
--    wins over the parameters' implicit one, and a call made with it passes the default
--    collation on to every text parameter of the function called.

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
    idempotency_key, user_id, p_now);
end
$_$;

CREATE OR REPLACE FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_n bigint;
begin
  if jsonb_typeof(tasks) = 'array' and jsonb_path_exists(tasks, 'strict $[*] ? (@.type() != "object")') then
    select x.n into v_n from jsonb_array_elements(tasks) with ordinality x(e, n)
    where jsonb_typeof(x.e) <> 'object' order by x.n limit 1;
    perform asyncflow.raise_error('AF006', format('tasks[%s]: must be a JSON object', v_n - 1));
  end if;
  -- (V38) insert_tasks gets the default collation, not the caller's (see create_task)
  return query select unnest(asyncflow.insert_tasks(task_type collate "default", tasks, p_now, false));
end
$_$;
