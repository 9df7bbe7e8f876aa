-- Why is this task not running? explain_task gives one reason.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- explain_task: why the task is where it is, as {"reason": CODE, ...detail}, the first that
-- applies of:
--   ended           {"status", "finished_at"}                    succeeded, failed or cancelled
--   running         {"worker", "lease_until", "stage"}
--   waiting_children {"ended", "total", "since", "next_stage"}   a spawn reply: n of m children ended
--                                                                (46_children.sql)
--   waiting_event   {"key", "since", "until", "next_stage"}      a wait reply (45_events.sql)
--   paused          {}                                           its type is paused
--   backing_off     {"until", "attempt", "error"}                a failed try's back-off
--   delayed         {"until"}                                    run_at, a "later", priority aside
--   key_held        {"queue_key"}                                a fair type's key held at 0
--   concurrency     {"scope": "type" | "key", "running", "limit", "queue_key"}
--   rate_limited    {"scope": "type" | "key", "next_start_at", "queue_key"}
--   ready           {"ahead", "capped"}                          the ready tasks of its type with an
--                                                                earlier order_time, counted up to
--                                                                10,000 (capped: there are more)
-- Reads only: the task, its type, its wait or join, the running tasks' index up to the limit, the
-- buckets as they would be refilled at p_now (nothing is refilled), and the ready index up to the
-- cap. Null when there is no such task (as get_task). A task in an open hold reads as pending
-- (ready); it runs once the hold ends.
create or replace function asyncflow.explain_task(task_id text, p_now timestamptz default null) returns jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp set jit = off as $$
declare
  p_task_id alias for $1;
  v_now timestamptz := asyncflow.check_now(p_now);
  v_key record;
  v_task asyncflow.tasks;
  v_type asyncflow.task_types;
  v_wait asyncflow.waits;
  v_join asyncflow.joins;
  v_key_text text;
  v_limit integer;
  v_running bigint;
  v_bucket record;
  v_tokens double precision;
  v_ahead bigint;
  c_cap constant integer := 10000;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null then
    return null;
  end if;
  select * into v_task from asyncflow.tasks t
  where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id;
  if not found then
    return null;
  end if;
  if v_task.status in ('succeeded', 'failed', 'cancelled') then
    return jsonb_build_object('reason', 'ended', 'status', v_task.status, 'finished_at', v_task.finished_at);
  elsif v_task.status = 'running' then
    return jsonb_build_object('reason', 'running', 'worker', v_task.owner, 'lease_until', v_task.lease_until,
      'stage', v_task.stage);
  elsif v_task.status = 'waiting' then
    select * into v_join from asyncflow.joins j
    where j.task_type = v_task.task_type and j.shard = v_task.shard and j.id = v_task.id;
    if found then
      return jsonb_build_object('reason', 'waiting_children', 'ended', v_join.ended, 'total', v_join.total,
        'since', v_join.since, 'next_stage', v_task.stage);
    end if;
    select * into v_wait from asyncflow.waits w
    where w.task_type = v_task.task_type and w.shard = v_task.shard and w.id = v_task.id;
    return jsonb_build_object('reason', 'waiting_event', 'key', v_wait.event_key, 'since', v_wait.since,
      'until', v_wait.until, 'next_stage', v_task.stage);
  end if;

  -- pending
  select * into v_type from asyncflow.task_types y where y.task_type = v_task.task_type;
  if v_type.paused then
    return jsonb_build_object('reason', 'paused');
  end if;
  if v_task.order_time > v_now then
    -- a failed try of this stage (a failure or a rescue) left its error and its try counted
    if v_task.attempt > 0 and v_task.last_error is not null then
      return jsonb_build_object('reason', 'backing_off', 'until', v_task.order_time, 'attempt', v_task.attempt,
        'error', v_task.last_error);
    end if;
    return jsonb_build_object('reason', 'delayed', 'until', v_task.order_time);
  end if;

  -- a fair type's key: held, or at its limit
  if v_type.fair_queues then
    v_key_text := coalesce(v_task.queue_key, '');
    select l.concurrency into v_limit from asyncflow.queue_limits l
    where l.task_type = v_task.task_type and l.queue_key = v_key_text;
    v_limit := coalesce(v_limit, v_type.queue_concurrency);
    if v_limit = 0 then
      return jsonb_build_object('reason', 'key_held', 'queue_key', v_task.queue_key);
    end if;
    if v_limit is not null then
      select count(*) into v_running from (select 1 from asyncflow.tasks t
        where t.task_type = v_task.task_type and t.status = 'running'
          and coalesce(t.queue_key, '') = v_key_text limit v_limit) x;
      if v_running >= v_limit then
        return jsonb_build_object('reason', 'concurrency', 'scope', 'key', 'queue_key', v_task.queue_key,
          'running', v_running, 'limit', v_limit);
      end if;
    end if;
  end if;
  if v_type.concurrency is not null then
    select count(*) into v_running from (select 1 from asyncflow.tasks t
      where t.task_type = v_task.task_type and t.status = 'running' limit v_type.concurrency) x;
    if v_running >= v_type.concurrency then
      return jsonb_build_object('reason', 'concurrency', 'scope', 'type', 'running', v_running,
        'limit', v_type.concurrency);
    end if;
  end if;

  -- token buckets as a claim at v_now would refill them: under one whole token, no start
  if v_type.rate_limited then
    select * into v_bucket from asyncflow.rate_limits r where r.task_type = v_task.task_type;
    if found then
      v_tokens := least(v_bucket.max_starts::double precision,
        v_bucket.tokens + greatest(0, date_part('epoch', v_now - v_bucket.refilled_at)) * v_bucket.max_starts
          / v_bucket.period);
      if v_tokens < 1 then
        return jsonb_build_object('reason', 'rate_limited', 'scope', 'type', 'next_start_at',
          greatest(v_now, v_bucket.refilled_at) + make_interval(secs => (1 - v_tokens) * v_bucket.period / v_bucket.max_starts));
      end if;
    end if;
  end if;
  if v_type.fair_queues and v_type.queue_rate_limited then
    select r.tokens, r.refilled_at, coalesce(r.max_starts, v_type.queue_max_starts) as max_starts,
      coalesce(r.period, v_type.queue_rate_period) as period
    into v_bucket from asyncflow.queue_rate_limits r
    where r.task_type = v_task.task_type and r.queue_key = v_key_text;
    -- no bucket: a full one
    if found and v_bucket.max_starts is not null then
      v_tokens := least(v_bucket.max_starts::double precision,
        v_bucket.tokens + greatest(0, date_part('epoch', v_now - v_bucket.refilled_at)) * v_bucket.max_starts
          / v_bucket.period);
      if v_tokens < 1 then
        return jsonb_build_object('reason', 'rate_limited', 'scope', 'key', 'queue_key', v_task.queue_key,
          'next_start_at', greatest(v_now, v_bucket.refilled_at)
            + make_interval(secs => (1 - v_tokens) * v_bucket.period / v_bucket.max_starts));
      end if;
    end if;
  end if;

  -- ready: the ready tasks a claim takes before it (by order_time; a fair type takes keys by
  -- turns, so for it this is the type's queue, not its key's), through the ready index, capped
  select count(*) into v_ahead from (select 1 from asyncflow.tasks t
    where t.task_type = v_task.task_type
      and t.shard >= (select p.begin_pos from asyncflow.positions p where p.task_type = v_task.task_type)
      and t.status = 'pending' and t.order_time < v_task.order_time
    limit c_cap + 1) x;
  return jsonb_build_object('reason', 'ready', 'ahead', least(v_ahead, c_cap), 'capped', v_ahead > c_cap);
end
$$;
