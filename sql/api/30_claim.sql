-- The claim path: claim_tasks hands a claim to the type's own type_claim__<type>; next_due and
-- held_tasks.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- claim_tasks: takes up to p_limit ready tasks of one type (bounded by schedule_limit and the
-- type's concurrency), for any type: the type's claim function does the work.
create or replace function asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamptz default null)
returns setof asyncflow.claimed_task
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  if p_owner is null or length(p_owner) not between 1 and 200 then
    perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
  end if;
  perform asyncflow.check_now(p_now);
  perform 1 from asyncflow.task_types where task_type = p_task_type;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  -- a task_types key passed check_type_name when the type was registered
  return query execute format('select * from asyncflow.%I($1, $2, $3)', 'type_claim__' || p_task_type)
    using p_owner, p_limit, p_now;
end
$$;

-- can_hold and hold_timeout, which holds called, are written out in
-- templates/fragments/hold_start.sql (a call of each, with its SET search_path, cost a hold on an
-- idle connection more than its statements): a database migrated before loses them here, in the
-- transaction that makes the types' holds again without them.
drop function if exists asyncflow.can_hold(asyncflow.task_types, regclass);
drop function if exists asyncflow.hold_timeout();

-- fail_unreadable: a held task whose context no worker could read (p_why, from
-- asyncflow.unreadable) fails for good in the hold's transaction, as a claim fails it: the try
-- and the claim counted, p_why its last error, its parent's join told, the type's counters
-- moved. True, and the hold leaves the task out of its answer. With p_why null (a readable
-- context) it changes nothing and answers false. A hold calls it only for such a row.
create or replace function asyncflow.fail_unreadable(p_task_type text, p_shard integer, p_id bigint, p_why text,
  p_now timestamptz) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_parent text;
begin
  if p_why is null then
    return false;
  end if;
  update asyncflow.tasks t set status = 'failed', attempt = t.attempt + 1,
    claim_seq = asyncflow.next_claim_seq(t.claim_seq), claimed_at = p_now, last_error = p_why,
    finished_at = p_now, updated_at = p_now
  where t.task_type = p_task_type and t.shard = p_shard and t.id = p_id and t.status = 'pending'
  returning t.parent_id into v_parent;
  if found then
    if v_parent is not null then
      perform asyncflow.count_child_ends(array[v_parent]);
    end if;
    insert into asyncflow.type_counters as k (task_type, slot, failed, in_pending, in_failed)
    values (p_task_type, pg_backend_pid() % 16, 1, -1, 1)
    on conflict (task_type, slot) do update set failed = k.failed + excluded.failed,
      in_pending = k.in_pending + excluded.in_pending, in_failed = k.in_failed + excluded.in_failed;
  end if;
  -- left out of the hold's answer either way: no worker gets a context it cannot read
  return true;
end
$$;

-- next_due: when the type's next pending task is due; null when it has none that a claim would
-- take: the type is paused, or (with fair_queues) every pending task is in a held queue key
-- (a limit of 0, see set_queue_limit).
--
-- Nothing is due where claims take nothing: a next_due that answered "ready now" for a paused
-- type's pending tasks, or a held key's, would send its worker to claim again at once (every
-- hold window with held claims, back to back without them: thousands of statements a second),
-- and an `--exit-when-idle` worker would never exit. Workers then wait for a wake-up (or their
-- poll): resuming a type (paused going from true to false, by register_task_type / `asyncflow
-- type resume` or an UPDATE) and lifting a key's hold wake them, as an insert would.
--
-- The first pending task by the ready index, not min(order_time): planned generically, the
-- aggregate read every pending row of the type through a bitmap scan (tens of milliseconds at
-- 100,000 pending, in every worker that found less than a batch), and a bitmap scan never marks
-- the index entries of finished tasks dead; the index scan stops at the first pending row.
create or replace function asyncflow.next_due(p_task_type text) returns timestamptz
language plpgsql stable security definer set search_path = pg_catalog, pg_temp
set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off as $$
declare
  v_type asyncflow.task_types;
  v_begin integer;
  v_due timestamptz;
begin
  select * into v_type from asyncflow.task_types where task_type = p_task_type;
  if not found or v_type.paused then
    return null;
  end if;
  select begin_pos into v_begin from asyncflow.positions where task_type = p_task_type;
  if v_type.fair_queues
      and exists (select 1 from asyncflow.queue_limits l where l.task_type = p_task_type and l.concurrency = 0) then
    select t.order_time into v_due from asyncflow.tasks t
    where t.task_type = p_task_type and t.status = 'pending' and t.shard >= v_begin
      and not exists (select 1 from asyncflow.queue_limits l
                      where l.task_type = p_task_type and l.concurrency = 0 and l.queue_key = coalesce(t.queue_key, ''))
    order by t.order_time limit 1;
    return v_due;
  end if;
  select t.order_time into v_due from asyncflow.tasks t
  where t.task_type = p_task_type and t.status = 'pending' and t.shard >= v_begin
  order by t.order_time limit 1;
  return v_due;
end
$$;

-- held_tasks: the running tasks a worker holds, read by owner in one statement.
--
-- For POST /v1/worker/held (a remote worker that lost the answer to a hold finds what it
-- claimed). Paging through every running task of the type with list_tasks, 1,000 whole tasks at
-- a time (context, result and schedule log built into JSON), would cost a type with 100,000
-- running tasks a hundred statements and all their JSON for a worker holding ten. held_tasks
-- reads the type's running tasks through its partial index on running tasks and returns only
-- the worker's, with only the fields the route answers.
create or replace function asyncflow.held_tasks(p_task_type text, p_owner text)
returns table (task_id text, claim_seq bigint, stage text, attempt integer, lease_until timestamptz)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform asyncflow.check_type_name(p_task_type);
  if not exists (select 1 from asyncflow.task_types y where y.task_type = p_task_type) then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  return query
  select asyncflow.format_task_id(t.task_type, t.shard, t.id), t.claim_seq, t.stage, t.attempt, t.lease_until
  from asyncflow.tasks t
  where t.task_type = p_task_type and t.status = 'running' and t.owner = p_owner
  order by t.shard, t.id;
end
$$;
