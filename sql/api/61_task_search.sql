-- Finding tasks by a filter, and bulk retry / cancel of what a filter selects.
-- The current text of each function: edit here, `asyncflow migrate` applies it.
--
-- A filter is a JSON object with any of these keys, each a string (or null: no condition):
--   type, status, stage, queue_key, user_id   equal to the task's
--   created_after, created_before             created_at >= / < the time (RFC 3339)
--   q                                         an exact task id, an idempotency key, or text in
--                                             the task's last error (case-insensitive)
-- Any other key, a value that is not a string, a bad status or time raises AF006.
--
-- Order. Types by name, and within a type newest first (by id, the order its tasks were created)
-- or, asked for, oldest first. Ids count per type, so no index orders tasks of several types by
-- age: newest first across types is a type's newest tasks, then the next type's.
--
-- Cost. Tasks are read a type at a time along its shards' primary keys (backwards for newest
-- first), so a page reads only as far as it needs to fill itself, a type filter reads only that
-- type's partitions, and keyset paging (p_after) starts where the last page ended. A task id in q reads one row by
-- its key; an idempotency key reads asyncflow.idempotency_keys by its key, once per type. Text
-- in the last error has no index: it is looked for in a window of at most 10,000 tasks that
-- match the other conditions (from p_after on), so narrow a search of a large store by type,
-- status or creation time.

-- filter_tasks: the rows of asyncflow.tasks that match p_filter (see above) and whose status is
-- one of p_statuses (null: any), without a workflow node's tasks when p_plain_only, after the
-- task id p_after, in (type, id) order, ids descending when p_newest, at most p_limit. Private:
-- find_tasks and the bulk functions read through it. Locks: none.
-- Planned for each call's values (plan_cache_mode): a generic plan, which the plan cache may
-- settle on after five calls, cannot use the partial index of failed and cancelled tasks
-- ("tasks_<type>$failed_cancelled") and would read every task of the type to fill a page. The
-- custom plan also folds p_newest's CASEs away, so each direction reads along the key.
create or replace function asyncflow.filter_tasks(p_filter jsonb, p_statuses asyncflow.task_status[],
  p_plain_only boolean, p_after text, p_limit integer, p_newest boolean)
returns setof asyncflow.tasks
language plpgsql stable security definer set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_custom_plan as $$
declare
  v_bad text;
  v_type text;
  v_status asyncflow.task_status;
  v_stage text;
  v_queue_key text;
  v_user_id text;
  v_after_created timestamptz;
  v_before_created timestamptz;
  v_q text;
  v_id_type text;
  v_id_shard integer;
  v_id bigint;
  v_after_type text;
  v_after_id bigint;
  v_like text;
  v_window integer;
begin
  if p_filter is null then
    p_filter := '{}';
  end if;
  if jsonb_typeof(p_filter) <> 'object' then
    perform asyncflow.raise_error('AF006', 'the filter must be a JSON object');
  end if;
  select string_agg(k, ', ' order by k) into v_bad from jsonb_object_keys(p_filter) k
  where k not in ('type', 'status', 'stage', 'queue_key', 'user_id', 'created_after', 'created_before', 'q');
  if v_bad is not null then
    perform asyncflow.raise_error('AF006', format('unknown filter field(s): %s', v_bad));
  end if;
  select string_agg(k, ', ' order by k) into v_bad from jsonb_each(p_filter) e(k, v)
  where jsonb_typeof(v) not in ('string', 'null');
  if v_bad is not null then
    perform asyncflow.raise_error('AF006', format('filter field(s) must be strings: %s', v_bad));
  end if;
  v_type := p_filter->>'type';
  v_stage := p_filter->>'stage';
  v_queue_key := p_filter->>'queue_key';
  v_user_id := p_filter->>'user_id';
  v_q := nullif(p_filter->>'q', '');
  if p_filter->>'status' is not null then
    if p_filter->>'status' not in ('pending', 'running', 'waiting', 'succeeded', 'failed', 'cancelled') then
      perform asyncflow.raise_error('AF006', format(
        'status must be one of pending, running, waiting, succeeded, failed, cancelled; got %L', p_filter->>'status'));
    end if;
    v_status := (p_filter->>'status')::asyncflow.task_status;
  end if;
  begin
    v_after_created := (p_filter->>'created_after')::timestamptz;
    v_before_created := (p_filter->>'created_before')::timestamptz;
  exception when others then
    perform asyncflow.raise_error('AF006', format('created_after and created_before must be times (RFC 3339), got %L and %L',
      p_filter->>'created_after', p_filter->>'created_before'));
  end;
  if not (asyncflow.now_ok(v_after_created) and asyncflow.now_ok(v_before_created)) then
    perform asyncflow.raise_error('AF006', 'created_after and created_before must be times from 0002-01-01 to 9998-01-01');
  end if;
  if p_after is not null then
    select k.task_type, k.id into v_after_type, v_after_id from asyncflow.parse_task_id(p_after) k;
    if v_after_type is null then
      perform asyncflow.raise_error('AF006', format('after must be a task id, got %L', p_after));
    end if;
  end if;

  if v_q is not null then
    select k.task_type, k.shard, k.id into v_id_type, v_id_shard, v_id from asyncflow.parse_task_id(v_q) k;
    -- an exact id: its one row by its key, if it matches the rest; else text or a key
    if v_id_type is null then
      v_like := '%' || replace(replace(replace(v_q, '\', '\\'), '%', '\%'), '_', '\_') || '%';
    end if;
  end if;

  v_window := case when v_like is null then p_limit else 10000 end;
  return query
  with window_ as (
    -- the tasks matching every condition but q, in order: all of them without q, at most
    -- 10,000 for the search of error text. Read a type at a time, in name order: within one
    -- type the shards' primary keys (id, shard) give id order, so a page stops reading once it
    -- is full. Read all at once, tasks of every type were sorted by (type, id) first: 0.4 s a
    -- page at 3 M tasks, against 2 ms.
    select t.task_type, t.shard, t.id, t.last_error
    from asyncflow.task_types y
    cross join lateral (
      select t.task_type, t.shard, t.id, t.last_error from asyncflow.tasks t
      -- the type filter again here: the planner prunes partitions by this subquery's own
      -- conditions, not by the outer one's
      where t.task_type = y.task_type and (v_type is null or t.task_type = v_type)
        and (v_status is null or t.status = v_status)
        and (p_statuses is null or t.status = any(p_statuses)) and (not p_plain_only or t.run_ref is null)
        and (v_stage is null or t.stage = v_stage) and (v_queue_key is null or t.queue_key = v_queue_key)
        and (v_user_id is null or t.user_id = v_user_id)
        and (v_after_created is null or t.created_at >= v_after_created)
        and (v_before_created is null or t.created_at < v_before_created)
        -- after the cursor: within its type, ids past its id; in a later type, any (a bound on
        -- the key either way, so the page starts where the last one ended)
        and (v_after_type is null or case when p_newest
          then t.id < case when y.task_type = v_after_type then v_after_id else 9223372036854775807 end
          else t.id > case when y.task_type = v_after_type then v_after_id else 0 end end)
        and (v_id_type is null or (t.task_type, t.shard, t.id) = (v_id_type, v_id_shard, v_id))
      order by case when p_newest then t.id end desc, t.id
      limit v_window
    ) t
    where (v_type is null or y.task_type = v_type) and (v_after_type is null or y.task_type >= v_after_type)
      and (v_id_type is null or y.task_type = v_id_type)
    order by y.task_type, case when p_newest then t.id end desc, t.id
    limit v_window
  ), keys as (
    select w.task_type, w.shard, w.id from window_ w where v_like is null or w.last_error ilike v_like
    union
    -- an idempotency key: one index read per type
    select k.task_type, k.shard, k.id from asyncflow.task_types y
    join asyncflow.idempotency_keys k on k.task_type = y.task_type and k.idempotency_key = v_q
    where v_like is not null and (v_type is null or y.task_type = v_type)
  )
  select t.* from keys k
  join asyncflow.tasks t on t.task_type = k.task_type and t.shard = k.shard and t.id = k.id
  -- the type filters again here too: a partition this query cannot name is planned on each call
  where (v_type is null or t.task_type = v_type) and (v_id_type is null or t.task_type = v_id_type)
    and (v_status is null or t.status = v_status) and (p_statuses is null or t.status = any(p_statuses))
    and (not p_plain_only or t.run_ref is null)
    and (v_stage is null or t.stage = v_stage) and (v_queue_key is null or t.queue_key = v_queue_key)
    and (v_user_id is null or t.user_id = v_user_id)
    and (v_after_created is null or t.created_at >= v_after_created)
    and (v_before_created is null or t.created_at < v_before_created)
    and (v_after_type is null or t.task_type > v_after_type or (t.task_type = v_after_type
      and case when p_newest then t.id < v_after_id else t.id > v_after_id end))
  order by t.task_type, case when p_newest then t.id end desc, t.id
  limit p_limit;
end
$$;

-- find_tasks: one page of the tasks that match p_filter (see the top of this file), as JSON,
-- types by name and within a type newest first (p_order 'newest', the default) or oldest first
-- ('oldest'), after the task id p_after (the last of the page before, in the same order), at
-- most p_limit (1..1000). Errors: AF006 for a bad filter, after, limit or order.
create or replace function asyncflow.find_tasks(p_filter jsonb default '{}', p_after text default null,
  p_limit integer default 100, p_order text default 'newest')
returns setof jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', 'limit must be between 1 and 1000');
  end if;
  if p_order is null or p_order not in ('newest', 'oldest') then
    perform asyncflow.raise_error('AF006', format('order must be newest or oldest, got %L', p_order));
  end if;
  return query select asyncflow.task_json(t)
    from asyncflow.filter_tasks(p_filter, null, false, p_after, p_limit, p_order = 'newest') t;
end
$$;

-- bulk_change_tasks: retry_task ('retry') or cancel_task ('cancel') on the tasks that match
-- p_filter and can take it (retry: failed or cancelled tasks not working for a workflow node;
-- cancel: pending, running or waiting ones), at most p_limit (1..1000) of them in (type, id) order, each
-- as the single-task function does it. With p_dry_run nothing changes: matched is the number of
-- tasks that would be (counted up to 100,000; more is true past that). Otherwise changed is how
-- many were, and more whether others still match (call again: the changed ones no longer do).
-- Locks: those of retry_task / cancel_task, per task, in (type, id) order.
create or replace function asyncflow.bulk_change_tasks(p_action text, p_filter jsonb, p_dry_run boolean default false,
  p_limit integer default 1000, p_now timestamptz default null)
returns table (matched bigint, changed bigint, more boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_statuses asyncflow.task_status[];
  v_seen bigint := 0;
  v_changed bigint := 0;
  v record;
begin
  if p_action = 'retry' then
    v_statuses := '{failed,cancelled}';
  elsif p_action = 'cancel' then
    v_statuses := '{pending,running,waiting}';
  else
    perform asyncflow.raise_error('AF006', format('action must be retry or cancel, got %L', p_action));
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', 'limit must be between 1 and 1000');
  end if;
  if coalesce(p_dry_run, false) then
    select count(*) into v_seen
    from asyncflow.filter_tasks(p_filter, v_statuses, p_action = 'retry', null, 100001, false) t;
    return query select least(v_seen, 100000), 0::bigint, v_seen > 100000;
    return;
  end if;
  for v in select t.task_type, t.shard, t.id
    from asyncflow.filter_tasks(p_filter, v_statuses, p_action = 'retry', null, p_limit + 1, false) t
  loop
    v_seen := v_seen + 1;
    exit when v_seen > p_limit;
    if p_action = 'retry' then
      if asyncflow.retry_task(asyncflow.format_task_id(v.task_type, v.shard, v.id), v_now) then
        v_changed := v_changed + 1;
      end if;
    elsif asyncflow.cancel_task(asyncflow.format_task_id(v.task_type, v.shard, v.id), v_now) then
      v_changed := v_changed + 1;
    end if;
  end loop;
  return query select least(v_seen, p_limit::bigint), v_changed, v_seen > p_limit;
end
$$;
