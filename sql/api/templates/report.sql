-- type_report__<type>(owner, task_ids, claim_seqs, outcomes, stages, contexts, results, errors,
-- retries, delays, now, progress): the type's reports as typed arrays, called by report_task_arrays (and
-- straight by a worker that knows the type). Each report is applied only while its task is still
-- running under the same owner and claim_seq (the fence); anything else is answered as refused
-- and changes nothing. Outcomes: succeed, advance (next stage, context), fail (retried with
-- backoff while tries are left and retry is true), later (pending again in `delay` seconds, the
-- try given back), wait (waiting at the next stage for the event named in `errors`, at most
-- `delay` seconds: a row in asyncflow.waits, then asyncflow.match_waits takes an event already
-- sent), spawn (waiting at the next stage for the children listed in `results`: a row in
-- asyncflow.joins, then asyncflow.spawn_children creates them), release (handed back, the try
-- given back), heartbeat (lease extended). A child that ends adds one to its parent's join. With
-- any outcome, a progress (not null) becomes the task's: a heartbeat's, or the call's last one
-- written with its reply, so a value reported just before the reply is kept.
-- Counters and the stage-time histogram are written in the same statement.
-- Placeholders: {{report}} this function, {{tasks}}, {{task_type}}.
create or replace function asyncflow.{{report}}(p_owner text, p_task_ids text[], p_claim_seqs bigint[],
  p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[],
  p_retries boolean[], p_delays double precision[], p_now timestamptz, p_progress jsonb[] default null)
returns table (n bigint, task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $body$
#variable_conflict use_column
declare
  v_task_type constant text := {{task_type}};
  v_now constant timestamptz := asyncflow.check_now(p_now);
begin
  perform asyncflow.check_report_arrays(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results,
    p_errors, p_retries, p_delays, p_progress);
  if p_outcomes && array['succeed', 'advance', 'later', 'wait', 'spawn'] then
    -- the next stage (or the caller waiting on the result, or the next call of a stage that
    -- replied "later" with a new context, or the stage after a wait) starts only from a
    -- durable completion
    perform asyncflow.commit_durably();
  end if;
  if p_outcomes <@ array['succeed'] then
    -- A batch of successes only (every report of a one-stage burn-down, most batches of a
    -- busy worker): the same effects, counters and answers as the general statement below,
    -- without its per-report choices between outcomes and without the arrays a success does
    -- not use (a fifth of the report's cost).
    return query
    with r as (
      select x.n, x.task_id,
        split_part(x.task_id, '-', 2)::integer as shard, split_part(x.task_id, '-', 3)::bigint as id,
        x.claim_seq, x.result, nullif(x.progress, 'null'::jsonb) as progress
      from unnest(p_task_ids, p_claim_seqs, p_results, p_progress) with ordinality as x(task_id, claim_seq, result, progress, n)
      where split_part(x.task_id, '-', 1) = v_task_type
    ), changed as (
      update asyncflow.{{tasks}} t set
        status = 'succeeded', result = coalesce(r.result, '{}'::jsonb), progress = coalesce(r.progress, t.progress),
        lease_until = null, last_error = null, finished_at = v_now, updated_at = v_now
      from (select distinct on (shard, id) * from r order by shard, id, n desc) r
      where t.shard = r.shard and t.id = r.id
        and t.status::text = 'running' and t.owner = p_owner and t.claim_seq = r.claim_seq
      returning r.n, t.status, t.stage, t.claimed_at, t.lease_until, t.parent_id
    ), {{> child_ends}}, counted as (
      insert into asyncflow.type_counters as k (task_type, slot, succeeded, in_running, in_succeeded)
      select v_task_type, pg_backend_pid() % 16, count(*), -count(*), count(*) from changed having count(*) > 0
      {{> add_counts}}
    ), durations as (
      select c.stage, d.secs,
        {{> stage_bucket secs = d.secs}} as k
      from changed c
      cross join lateral (select floor(date_part('epoch', v_now - c.claimed_at) * 1000) / 1000 as secs) d
    ), per_bucket as (
      select stage, k, count(*) as n, sum(secs) as secs from durations group by stage, k
    ), {{> stage_times}}
    {{> report_answer}};
    perform asyncflow.notify_waiters(v_task_type, p_task_ids); -- see 47_task_waiters.sql
    return;
  end if;

  return query
  with r as (
    -- one pass of unnest over the typed arrays; ids are split inline (a lateral call to
    -- parse_task_id is not inlined and cost more than the update)
    select x.n, x.task_id,
      split_part(x.task_id, '-', 2)::integer as shard, split_part(x.task_id, '-', 3)::bigint as id,
      x.claim_seq, x.outcome, x.stage, nullif(x.context, 'null'::jsonb) as context, x.result,
      left(x.error, 256) as error, coalesce(x.retry, true) as retry, x.delay,
      nullif(x.progress, 'null'::jsonb) as progress
    from unnest(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries, p_delays,
        p_progress)
      with ordinality as x(task_id, claim_seq, outcome, stage, context, result, error, retry, delay, progress, n)
    where split_part(x.task_id, '-', 1) = v_task_type
  ), changed as (
    update asyncflow.{{tasks}} t set
      status = case
        when r.outcome = 'succeed' then 'succeeded'
        when r.outcome = 'heartbeat' then 'running'
        when r.outcome = 'fail' and (not r.retry or t.attempt > t.max_retry_num) then 'failed'
        when r.outcome in ('wait', 'spawn') then 'waiting'
        else 'pending' end::asyncflow.task_status,
      stage = case when r.outcome in ('advance', 'wait', 'spawn') then r.stage else t.stage end,
      context = case when r.outcome in ('advance', 'later', 'wait', 'spawn') then coalesce(r.context, t.context) else t.context end,
      -- what ended a wait is for the stage it woke, until that stage is done
      wake = case when r.outcome in ('advance', 'wait', 'spawn', 'succeed') then null else t.wake end,
      progress = coalesce(r.progress, t.progress),
      result = case when r.outcome = 'succeed' then coalesce(r.result, '{}'::jsonb) else t.result end,
      -- the last outcome's: a stage done clears a failed try's error (the schedule log keeps it)
      last_error = case when r.outcome = 'fail' then coalesce(r.error, 'failed')
        when r.outcome in ('succeed', 'advance', 'wait', 'spawn') then null else t.last_error end,
      attempt = case
        when r.outcome in ('advance', 'wait', 'spawn') then 0
        when r.outcome in ('later', 'release') then greatest(t.attempt - 1, 0)
        else t.attempt end,
      retry_count = case when r.outcome = 'fail' then t.retry_count + 1 else t.retry_count end,
      order_time = case
        when r.outcome = 'advance' then v_now - make_interval(secs => t.priority)
        when r.outcome = 'fail' then v_now + asyncflow.retry_wait(t.attempt, t.max_retry_interval)
        when r.outcome = 'later' then v_now + make_interval(secs => r.delay)
        else t.order_time end,
      -- a success keeps its worker: the log's last entry is made from the row when read
      owner = case when r.outcome in ('heartbeat', 'succeed') then t.owner end,
      lease_until = case when r.outcome = 'heartbeat'
        then v_now + make_interval(secs => (select max_processing_time from asyncflow.task_types y where y.task_type = t.task_type)) end,
      finished_at = case
        when r.outcome = 'succeed' or (r.outcome = 'fail' and (not r.retry or t.attempt > t.max_retry_num)) then v_now
        else t.finished_at end,
      -- the entry is built as cheaply as jsonb allows: date_part in double precision rather
      -- than numeric extract, and the error key added only to failures instead of stripping
      -- nulls from every entry; a success's entry is not written at all (asyncflow.task_log
      -- makes it from the row: worker, stage, attempt, claimed_at and finished_at are all there)
      schedule_log = case when r.outcome in ('heartbeat', 'succeed') then t.schedule_log
        else asyncflow.append_log(t.schedule_log, case when r.outcome = 'fail'
          then jsonb_build_object('worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
            'cost_ms', floor(date_part('epoch', v_now - t.claimed_at) * 1000)::bigint, 'outcome', r.outcome,
            'error', coalesce(r.error, 'failed'))
          else jsonb_build_object('worker', t.owner, 'stage', t.stage, 'attempt', t.attempt, 'start', t.claimed_at,
            'cost_ms', floor(date_part('epoch', v_now - t.claimed_at) * 1000)::bigint, 'outcome', r.outcome) end) end,
      updated_at = v_now
    -- a task named twice in one batch: its last report wins, the earlier ones are refused
    from (select distinct on (shard, id) * from r order by shard, id, n desc) r
    where t.shard = r.shard and t.id = r.id
      -- status compared as text: the partial index on running tasks must not look like a way
      -- in (the planner would walk every running task for each report)
      and t.status::text = 'running' and t.owner = p_owner and t.claim_seq = r.claim_seq
    returning r.n, t.status, t.lease_until, t.task_type, r.outcome,
      case when r.outcome <> 'succeed' then t.schedule_log -> -1 end as entry, t.stage, t.claimed_at,
      t.shard, t.id, case when r.outcome = 'wait' then r.error end as event_key, r.delay, t.parent_id,
      case when r.outcome = 'spawn' then r.result end as spawn
  ), spawned as (
    -- a spawn's list, until spawn_children creates its children below
    insert into asyncflow.joins (task_type, shard, id, spawn, since)
    select v_task_type, c.shard, c.id, c.spawn, v_now from changed c where c.outcome = 'spawn'
    on conflict (task_type, shard, id) do update set spawn = excluded.spawn, since = excluded.since,
      children = null, total = 0, ended = 0
  ), {{> child_ends}}, waited as (
    -- since: the claim of the call that asked to wait, so an event sent while it ran counts
    insert into asyncflow.waits (task_type, shard, id, event_key, since, until)
    select v_task_type, c.shard, c.id, c.event_key, c.claimed_at, v_now + make_interval(secs => c.delay)
    from changed c where c.outcome = 'wait'
    on conflict (task_type, shard, id) do update set event_key = excluded.event_key, since = excluded.since,
      until = excluded.until
  ), counted as (
    -- every changed task was running; all but heartbeats leave it
    insert into asyncflow.type_counters as k (task_type, slot, succeeded, failed, retried,
      in_pending, in_running, in_succeeded, in_failed, in_waiting)
    select c.task_type, pg_backend_pid() % 16, count(*) filter (where c.status = 'succeeded'),
      count(*) filter (where c.status = 'failed'), count(*) filter (where c.outcome = 'fail' and c.status = 'pending'),
      count(*) filter (where c.status = 'pending'), -count(*), count(*) filter (where c.status = 'succeeded'),
      count(*) filter (where c.status = 'failed'), count(*) filter (where c.status = 'waiting')
    from changed c where c.outcome <> 'heartbeat' group by c.task_type
    {{> add_counts}}
  ), durations as (
    select coalesce(c.entry ->> 'stage', c.stage) as stage, d.secs,
      {{> stage_bucket secs = d.secs}} as k
    from changed c cross join lateral (select case when c.entry is null
      then floor(date_part('epoch', v_now - c.claimed_at) * 1000) / 1000
      else (c.entry ->> 'cost_ms')::double precision / 1000 end as secs) d
    where c.outcome not in ('heartbeat', 'release')
  ), per_bucket as (
    select stage, k, count(*) as n, sum(secs) as secs from durations group by stage, k
  ), {{> stage_times}}
  {{> report_answer}};

  -- A wait just begun takes the event of its key sent while its call ran, if there was one (a
  -- statement of its own, after the key's lock: see sql/api/45_events.sql).
  if 'wait' = any (p_outcomes) then
    perform asyncflow.match_waits(v_task_type, p_task_ids, v_now);
  end if;
  -- A spawn just accepted creates its children (46_children.sql).
  if 'spawn' = any (p_outcomes) then
    perform asyncflow.spawn_children(v_task_type, p_task_ids, v_now);
  end if;

  perform asyncflow.notify_waiters(v_task_type, p_task_ids); -- see 47_task_waiters.sql
  -- Tasks that went back to pending are ready for any worker of the type (one NOTIFY).
  if exists (select 1 from unnest(p_task_ids, p_outcomes) u(task_id, outcome)
      where u.outcome in ('advance', 'release', 'fail', 'later') and split_part(u.task_id, '-', 1) = v_task_type) then
    perform asyncflow.wake(v_task_type);
  end if;
end
$body$;
