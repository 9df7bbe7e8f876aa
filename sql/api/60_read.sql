-- Reads: a task, a list of tasks, a fair type's queues.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- The task's schedule log as readers see it. A success writes no log entry (building and
-- appending one was about a quarter of a report's cost): a task that succeeded, and kept its
-- worker as owner, gets its success's entry here, made from the row (worker, stage, attempt,
-- claimed_at, finished_at).
create or replace function asyncflow.task_log(t asyncflow.tasks) returns jsonb
language sql stable parallel safe as $$
  select case when t.status = 'succeeded' and t.owner is not null
    then asyncflow.append_log(t.schedule_log, jsonb_build_object('worker', t.owner, 'stage', t.stage,
      'attempt', t.attempt, 'start', t.claimed_at,
      'cost_ms', floor(date_part('epoch', t.finished_at - t.claimed_at) * 1000)::bigint, 'outcome', 'succeed'))
    else t.schedule_log end
$$;

-- The public form of a task, its log through task_log; owner shown only while it means
-- something (a succeeded task keeps its worker for its log entry). Its free-form JSON goes out
-- through json_out (00_util.sql): an unreadable context, result or log is shown as text, with
-- decode_error, and the row still reads.
create or replace function asyncflow.task_json(t asyncflow.tasks) returns jsonb
language sql stable as $$
  select asyncflow.json_out(jsonb_build_object(
    'id', asyncflow.format_task_id(t.task_type, t.shard, t.id), 'type', t.task_type, 'stage', t.stage,
    'status', t.status, 'priority', t.priority, 'attempt', t.attempt, 'retry_count', t.retry_count,
    'max_retry_num', t.max_retry_num, 'max_retry_interval', t.max_retry_interval, 'claim_seq', t.claim_seq,
    'owner', case when t.status <> 'succeeded' then t.owner end, 'lease_until', t.lease_until,
    'order_time', t.order_time, 'user_id', t.user_id, 'queue_key', t.queue_key,
    'idempotency_key', t.idempotency_key, 'context', t.context, 'result', t.result, 'error', t.last_error,
    'schedule_log', asyncflow.task_log(t), 'created_at', t.created_at, 'updated_at', t.updated_at,
    'finished_at', t.finished_at, 'schedule', t.schedule, 'tick', t.tick, 'progress', t.progress,
    'traceparent', t.traceparent, 'parent_id', t.parent_id),
    '{context,result,schedule_log,progress}')
$$;

-- get_task: the task as JSON, or null when there is none (also for text that is not a task id).
create or replace function asyncflow.get_task(task_id text) returns jsonb
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

-- list_tasks: tasks as JSON, filtered by any of type, status, stage, user, in id order within a
-- type (types by name), starting after the task id p_after (keyset pagination: pass the last id
-- of a page to get the next). At most p_limit (1..1000) rows. The same as find_tasks
-- (61_task_search.sql) with those four filters, oldest first.
create or replace function asyncflow.list_tasks(
  p_task_type text default null,
  p_status asyncflow.task_status default null,
  p_stage text default null,
  p_user_id text default null,
  p_after text default null,
  p_limit integer default 100
) returns setof jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  return query select asyncflow.find_tasks(jsonb_strip_nulls(jsonb_build_object('type', p_task_type,
    'status', p_status, 'stage', p_stage, 'user_id', p_user_id)), p_after, p_limit, 'oldest');
end
$$;

-- The queues of a type with fair_queues, in key order after p_after (null: from the first), at
-- most p_limit (1 to 1000) keys that have pending or running tasks: tasks ready now, delayed,
-- running, the age of the oldest ready one in seconds (since it became ready, see queue_depth;
-- 0 when none), and the limit that applies
-- (the key's own, else queue_concurrency; null: none). Reads the key indexes: a loose scan for
-- the keys, then the listed keys' own entries. Errors: AF001, AF003, AF006 (a type without
-- fair_queues has no key indexes to read).
create or replace function asyncflow.queue_keys(p_task_type text, p_after text default null, p_limit integer default 100)
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
        min(greatest(t.order_time, t.updated_at)) filter (where t.order_time <= now()) as oldest
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
