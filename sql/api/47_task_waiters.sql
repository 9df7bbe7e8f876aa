-- Waiting for a task to end, woken by a notification: watch_task, notify_waiters.
-- The current text of each function: edit here, `asyncflow migrate` applies it.
--
--   waiter ── LISTEN asyncflow_ended ── watch_task(id, seconds): a row in task_waiters, then the
--             task read under a share lock ── ended? done : sleep until a notification names it
--   a statement that ends tasks (a report, a hold's finish, cancel_task, the rescuer) ──
--             notify_waiters(type, its tasks): nothing unless the type has a waiter; else, for
--             each waited task that has ended, its row deleted and NOTIFY asyncflow_ended, '<id>'
--
-- No end is missed. A statement that ends a task holds the task's row lock from its UPDATE to
-- its commit, and calls notify_waiters in a later statement (a fresh snapshot). watch_task writes
-- its row, then reads the task FOR SHARE, in one transaction: if it takes the lock first, the
-- ending UPDATE waits for its commit and notify_waiters then sees the row; if the UPDATE came
-- first, the read waits for that transaction and sees the task ended (or, rolled back, not).
-- A waiter listens before it calls watch_task, so a notification sent after it is heard.
-- Nobody waiting costs each ending statement one probe of an empty index. Ends not covered
-- (a claim failing a context no worker can read) are found by the waiters' slow re-read.

-- watch_task: the task as get_task shows it (null when there is none), with a waiter registered
-- for `p_seconds` (at most a year) unless it has ended or p_seconds is 0. Waiters whose time ran
-- out are removed on the way.
create or replace function asyncflow.watch_task(task_id text, p_seconds double precision) returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  p_task_id alias for $1;
  v_key record;
  v_task asyncflow.tasks;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  if p_seconds is null or p_seconds = 'NaN'::double precision or p_seconds not between 0 and 31536000 then
    perform asyncflow.raise_error('AF006', 'seconds must be a number from 0 to 31536000');
  end if;
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    return null;
  end if;
  select * into v_task from asyncflow.tasks
  where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id;
  if not found then
    return null;
  end if;
  if v_task.status in ('succeeded', 'failed', 'cancelled') or p_seconds = 0 then
    return asyncflow.task_json(v_task);
  end if;
  delete from asyncflow.task_waiters w using (
    select x.task_type, x.shard, x.id from asyncflow.task_waiters x where x.until < now() limit 100
  ) gone
  where w.task_type = gone.task_type and w.shard = gone.shard and w.id = gone.id;
  -- a second of slack: a waiter's clock and the database's may differ a little
  insert into asyncflow.task_waiters as w (task_type, shard, id, until)
  values (v_key.task_type, v_key.shard, v_key.id, now() + make_interval(secs => p_seconds + 1))
  on conflict (task_type, shard, id) do update set until = greatest(w.until, excluded.until);
  -- the lock is not held past the wait: a hold keeps its tasks' rows locked until its finish
  perform set_config('lock_timeout', ceil(p_seconds * 1000)::bigint::text || 'ms', true);
  begin
    select * into v_task from asyncflow.tasks
    where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id
    for share;
  exception when lock_not_available then
    null; -- the wait ran out behind the lock: the task as read above
  end;
  perform set_config('lock_timeout', v_lock_timeout, true);
  if v_task.status in ('succeeded', 'failed', 'cancelled') then
    delete from asyncflow.task_waiters
    where task_type = v_key.task_type and shard = v_key.shard and id = v_key.id;
  end if;
  return asyncflow.task_json(v_task);
end
$$;

-- notify_waiters: for each of these tasks of one type that has ended and has a waiter, removes
-- the waiter's row and sends NOTIFY asyncflow_ended, '<task id>' (at commit). Called by each
-- statement that ends tasks, after its UPDATE, in the same transaction; one index probe when the
-- type has no waiter.
create or replace function asyncflow.notify_waiters(p_task_type text, p_shards integer[], p_ids bigint[])
returns void
language plpgsql as $$
declare
  v_shards integer[];
  v_ids bigint[];
  v_ended text[];
begin
  if not exists (select 1 from asyncflow.task_waiters w where w.task_type = p_task_type) then
    return;
  end if;
  -- the type's waiters first (a few rows), matched by id alone: a batch's tasks are looked up
  -- only when one of them is waited on (a task waited on that ended outside this batch is
  -- notified too, which is right)
  select array_agg(w.shard), array_agg(w.id) into v_shards, v_ids
  from asyncflow.task_waiters w where w.task_type = p_task_type and w.id = any (p_ids);
  if v_ids is null then
    return;
  end if;
  with gone as (
    delete from asyncflow.task_waiters w
    using unnest(v_shards, v_ids) u(shard, id), asyncflow.tasks t
    where w.task_type = p_task_type and w.shard = u.shard and w.id = u.id
      and t.task_type = p_task_type and t.shard = u.shard and t.id = u.id
      and t.status in ('succeeded', 'failed', 'cancelled')
    returning w.shard, w.id
  )
  select array_agg(asyncflow.format_task_id(p_task_type, g.shard, g.id)) into v_ended from gone g;
  perform pg_notify('asyncflow_ended', e) from unnest(v_ended) e;
end
$$;

-- The same for task ids (a report's), those of other types left out.
create or replace function asyncflow.notify_waiters(p_task_type text, p_task_ids text[]) returns void
language plpgsql as $$
begin
  if exists (select 1 from asyncflow.task_waiters w where w.task_type = p_task_type) then
    perform asyncflow.notify_waiters(p_task_type,
      array(select split_part(i, '-', 2)::integer from unnest(p_task_ids) i where split_part(i, '-', 1) = p_task_type),
      array(select split_part(i, '-', 3)::bigint from unnest(p_task_ids) i where split_part(i, '-', 1) = p_task_type));
  end if;
end
$$;
