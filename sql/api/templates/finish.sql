-- type_finish__<type>(owner, shards, ids, claim_seqs, outcomes, results, stages, contexts,
-- seconds, passed): ends a hold, in the hold's transaction. Each task's outcome is its call's reply when
-- it came while the hold was open: 'succeed' (with its result) or 'advance' (with the next
-- stage and, or null to keep it, the next context), its call having taken `seconds` from the
-- claim; null when the call has not replied. A success within max_context_bytes ends
-- succeeded (finished_at, the stage-time histogram); an advance whose stage and context would
-- pass report_tasks' checks goes on to its next stage as a report would have put it (pending,
-- attempt 0, its schedule-log entry, ready at once); every other task is claimed ('running',
-- leased) and its reply, if any, is reported as usual. Only rows this transaction has locked
-- (the hold's: their xmax is its xid), pending, whose next claim_seq (asyncflow.next_claim_seq
-- at the hold's now(): the one the hold gave) is the one given, change: without the hold a
-- finish changes nothing. Answers (accepted, status, lease) come only for the tasks that did not
-- end as asked: refused (not accepted), or claimed although their call replied (a result too
-- large, a bad stage: its report will say so); no answer means the reply was written, or the
-- task claimed.
-- Stages chained in the worker: a held call that went on to a next stage while the hold was
-- open may have had that stage run at once, in the same hold (the worker's chain). `passed`
-- (null, or null per task) says so: {"stage": the stage the task is at now, "context": its
-- context (null: unchanged), "start_ms": when that stage's call began, "log": [{"stage",
-- "start_ms", "cost_ms"}, ...] one entry per stage passed, in order}, times in milliseconds
-- from the claim. The passed stages are written as their advance reports would have written
-- them (schedule-log entries, stage-time histogram), and the outcome then applies at the stage
-- reached; a task whose `passed` breaks report_tasks' rules is refused (not changed).
-- Placeholders: {{finish}} this function, {{tasks}}, {{task_type}}.
create or replace function asyncflow.{{finish}}(p_owner text, p_shards integer[], p_ids bigint[],
  p_claim_seqs bigint[], p_outcomes text[], p_results jsonb[], p_stages text[], p_contexts jsonb[],
  p_seconds double precision[], p_passed jsonb[] default null)
returns table (n bigint, task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $body$
#variable_conflict use_column
declare
  v_task_type constant text := {{task_type}};
  v_claimed_at constant timestamptz := now();
  v_ended constant double precision := date_part('epoch', clock_timestamp() - v_claimed_at);
  v_ended_ms constant numeric := floor(v_ended * 1000);
  v_xid constant xid := pg_current_xact_id()::xid;
  v_lease_until timestamptz;
  v_max_bytes integer;
  -- what every advance's log entry of this finish shares, built once: per task only its stage,
  -- try and cost are added (a whole entry per task, its time formatted each time, cost as much
  -- as the row's other changes together)
  v_entry jsonb;
begin
  if p_owner is null or length(p_owner) not between 1 and 200 then
    perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
  end if;
  if cardinality(p_ids) > 10000 or cardinality(p_shards) is distinct from cardinality(p_ids)
    or cardinality(p_claim_seqs) is distinct from cardinality(p_ids)
    or cardinality(p_outcomes) is distinct from cardinality(p_ids)
    or cardinality(p_results) is distinct from cardinality(p_ids)
    or cardinality(p_stages) is distinct from cardinality(p_ids)
    or cardinality(p_contexts) is distinct from cardinality(p_ids)
    or cardinality(p_seconds) is distinct from cardinality(p_ids)
    or (p_passed is not null and cardinality(p_passed) <> cardinality(p_ids))
    -- unnest would flatten an array of more dimensions
    or coalesce(array_ndims(p_shards), 1) <> 1 or coalesce(array_ndims(p_ids), 1) <> 1
    or coalesce(array_ndims(p_claim_seqs), 1) <> 1 or coalesce(array_ndims(p_outcomes), 1) <> 1
    or coalesce(array_ndims(p_results), 1) <> 1 or coalesce(array_ndims(p_stages), 1) <> 1
    or coalesce(array_ndims(p_contexts), 1) <> 1 or coalesce(array_ndims(p_seconds), 1) <> 1
    or coalesce(array_ndims(p_passed), 1) <> 1 then
    perform asyncflow.raise_error('AF006', 'shards, ids, claim_seqs, outcomes, results, stages, contexts and '
      'seconds (and passed, when given): one-dimensional arrays of one length, at most 10000');
  end if;
  if exists (select 1 from unnest(p_outcomes) o where o not in ('succeed', 'advance')) then
    perform asyncflow.raise_error('AF006', 'a held task''s outcome must be succeed, advance or null');
  end if;
  select v_claimed_at + make_interval(secs => max_processing_time) into v_lease_until
  from asyncflow.task_types where task_type = v_task_type;
  select max_context_bytes into v_max_bytes from asyncflow.config;
  v_entry := jsonb_build_object('worker', p_owner, 'start', v_claimed_at, 'outcome', 'advance');
  if array_position(p_outcomes, 'succeed') is null and array_position(p_outcomes, 'advance') is null then
    -- claims only: as type_claim__, not waiting for the disk
    perform set_config('synchronous_commit', 'off', true);
  else
    -- completions: the next stage starts only from a durable one, whatever the server's setting
    perform asyncflow.commit_durably();
  end if;
  -- passed: null, or null for every task (as the worker sends it when no call went on to a next
  -- stage); array_remove is one pass in C over the array
  if (p_passed is null or cardinality(array_remove(p_passed, null)) = 0) and p_outcomes <@ array['succeed'] then
    -- Successes only, none chained (every finish of a one-stage burn-down whose calls all
    -- replied in the window): the general statement's effects, counters and answers, without
    -- its choices between outcomes and its checks of chained stages (a third of its time).
    return query
    with r as (
      select x.n, x.shard, x.id, x.claim_seq, x.outcome, x.result,
        coalesce(pg_column_size(x.result) <= v_max_bytes, true) and asyncflow.json_ok(x.result) as ok,
        floor(least(greatest(coalesce(x.secs, v_ended), 0), v_ended) * 1000)::bigint as ms
      from unnest(p_shards, p_ids, p_claim_seqs, p_outcomes, p_results, p_seconds)
        with ordinality as x(shard, id, claim_seq, outcome, result, secs, n)
    ), changed as (
      -- a result that cannot be written leaves its task claimed, and its report says why
      update asyncflow.{{tasks}} t set
        status = case when r.ok then 'succeeded' else 'running' end::asyncflow.task_status,
        owner = p_owner, attempt = t.attempt + 1, claim_seq = r.claim_seq, claimed_at = v_claimed_at,
        lease_until = case when not r.ok then v_lease_until end, wake = case when not r.ok then t.wake end,
        result = case when r.ok then coalesce(r.result, '{}'::jsonb) else t.result end,
        finished_at = case when r.ok then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) else t.finished_at end,
        updated_at = v_claimed_at + make_interval(secs => case when r.ok then r.ms else 0 end / 1000.0::float8)
      from r
      where t.shard = r.shard and t.id = r.id
        and t.status::text = 'pending' and asyncflow.next_claim_seq(t.claim_seq) = r.claim_seq and t.xmax = v_xid
      returning r.n, t.status, t.lease_until, r.ok, r.ms / 1000.0::float8 as secs, t.stage, t.parent_id
    ), calls as (
      select c.stage, c.secs from changed c where c.ok
    ), {{> finish_end}};
  else
  return query
  -- materialized: r reads pass_ok three times, and an inlined q would check each passed that often
  with q as materialized (
    -- the hold's tasks, named by shard and number (no ids to parse); each once, as the
    -- worker names them (a task named twice is changed for one of its mentions, which one
    -- is not defined, and the other is answered as refused)
    select x.n, x.shard, x.id, x.claim_seq, x.outcome, x.result, x.stage,
      nullif(x.context, 'null'::jsonb) as context,
      -- the reply can be written here: report_tasks' checks of a success or an advance
      -- (and the JSON rule, asyncflow.json_ok: a reply that breaks it is reported, and refused)
      case x.outcome
        when 'succeed' then coalesce(pg_column_size(x.result) <= v_max_bytes, true) and asyncflow.json_ok(x.result)
        when 'advance' then asyncflow.stage_ok(x.stage)
          and coalesce(jsonb_typeof(x.context) in ('object', 'null'), true)
          and coalesce(pg_column_size(x.context) <= v_max_bytes, true)
          and coalesce(pg_column_size(x.result) <= v_max_bytes, true)
          and asyncflow.json_ok(x.context) and asyncflow.json_ok(x.result)
        else false end as ok,
      -- the call's time, within what has passed since the claim, in whole milliseconds
      -- (the log entry's cost_ms; secs below is made from it, not floored again: 1.001 * 1000
      -- is 1000.99... in double precision)
      floor(least(greatest(coalesce(x.secs, v_ended), 0), v_ended) * 1000)::bigint as ms,
      x.passed,
      -- the stages the worker chained: the stage reached and its context, checked as their
      -- advances' reports would be (CASE, not AND: a cast must not meet a value of another type)
      case when x.passed is null then true
        when jsonb_typeof(x.passed) <> 'object' then false
        else asyncflow.stage_ok(x.passed ->> 'stage')
          and coalesce(jsonb_typeof(x.passed -> 'start_ms') = 'number', false)
          and coalesce(jsonb_typeof(x.passed -> 'context') in ('object', 'null'), true)
          and coalesce(pg_column_size(x.passed -> 'context') <= v_max_bytes, true)
          and asyncflow.json_ok(x.passed -> 'context')
          and case when coalesce(jsonb_typeof(x.passed -> 'log') = 'array', false)
            and jsonb_array_length(x.passed -> 'log') between 1 and 100
            then not exists (select from jsonb_array_elements(x.passed -> 'log') e(e)
              where not case when jsonb_typeof(e) = 'object' then
                asyncflow.stage_ok(e ->> 'stage')
                and coalesce(jsonb_typeof(e -> 'start_ms') = 'number' and jsonb_typeof(e -> 'cost_ms') = 'number', false)
                else false end)
            else false end
        end as pass_ok
    from unnest(p_shards, p_ids, p_claim_seqs, p_outcomes, p_results, p_stages, p_contexts, p_seconds, p_passed)
      with ordinality as x(shard, id, claim_seq, outcome, result, stage, context, secs, passed, n)
  ), r as (
    select q.*, case when q.pass_ok then q.passed ->> 'stage' end as p_stage,
      case when q.pass_ok then nullif(q.passed -> 'context', 'null'::jsonb) end as p_context,
      -- when the call that replied began (0: the claim's own call)
      case when q.pass_ok and q.passed is not null
        then least(greatest((q.passed -> 'start_ms')::numeric, 0), q.ms)::bigint else 0 end as p_start
    from q
  ), changed as (
    update asyncflow.{{tasks}} t set
      status = case when not r.ok then 'running' when r.outcome = 'succeed' then 'succeeded'
        else 'pending' end::asyncflow.task_status,
      -- an advance leaves no owner, as its report would have
      owner = case when r.ok and r.outcome = 'advance' then null else p_owner end,
      -- a chained stage's call is its first try
      attempt = case when r.ok and r.outcome = 'advance' then 0 when r.passed is not null then 1 else t.attempt + 1 end,
      claim_seq = r.claim_seq, claimed_at = v_claimed_at + make_interval(secs => r.p_start / 1000.0::float8),
      lease_until = case when not r.ok then v_lease_until end,
      stage = case when r.ok and r.outcome = 'advance' then r.stage else coalesce(r.p_stage, t.stage) end,
      -- what ended a wait is for the stage it woke (sql/api/45_events.sql), until that stage is done
      wake = case when r.ok or r.p_stage is not null then null else t.wake end,
      context = case when r.ok and r.outcome = 'advance' then coalesce(r.context, r.p_context, t.context)
        else coalesce(r.p_context, t.context) end,
      order_time = case when r.ok and r.outcome = 'advance'
        then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) - make_interval(secs => t.priority)
        else t.order_time end,
      -- the entry report_tasks writes for an advance; a success's is made from the row when read
      schedule_log = case
        when r.passed is not null then asyncflow.append_logs(t.schedule_log,
          -- the chained stages' entries, then the advance's (its call began at p_start)
          (select jsonb_agg(v_entry || jsonb_build_object('stage', e ->> 'stage',
              'attempt', case when o = 1 then t.attempt + 1 else 1 end,
              'start', v_claimed_at + make_interval(secs => least(greatest((e -> 'start_ms')::numeric, 0), v_ended_ms)::float8 / 1000),
              'cost_ms', floor(least(greatest((e -> 'cost_ms')::numeric, 0), v_ended_ms))::bigint) order by o)
            from jsonb_array_elements(r.passed -> 'log') with ordinality l(e, o))
          || case when r.ok and r.outcome = 'advance' then jsonb_build_array(v_entry || jsonb_build_object(
            'stage', r.p_stage, 'attempt', 1, 'cost_ms', r.ms - r.p_start,
            'start', v_claimed_at + make_interval(secs => r.p_start / 1000.0::float8))) else '[]'::jsonb end)
        when r.ok and r.outcome = 'advance'
        then asyncflow.append_log(t.schedule_log,
          v_entry || jsonb_build_object('stage', t.stage, 'attempt', t.attempt + 1, 'cost_ms', r.ms))
        else t.schedule_log end,
      result = case when r.ok and r.outcome = 'succeed' then coalesce(r.result, '{}'::jsonb) else t.result end,
      finished_at = case when r.ok and r.outcome = 'succeed'
        then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) else t.finished_at end,
      updated_at = case when r.ok then v_claimed_at + make_interval(secs => r.ms / 1000.0::float8) else v_claimed_at end
    from r
    where t.shard = r.shard and t.id = r.id
      -- status compared as text: the ready index must not look like a way in
      and t.status::text = 'pending' and asyncflow.next_claim_seq(t.claim_seq) = r.claim_seq and t.xmax = v_xid
      and r.pass_ok
    -- the stage the call ran: an advance's is in the entry just written
    returning r.n, t.status, t.lease_until, r.ok, (r.ms - r.p_start) / 1000.0::float8 as secs, r.passed,
      case when r.ok and r.outcome = 'advance' then t.schedule_log -> -1 ->> 'stage' else t.stage end as stage,
      t.parent_id
  ), calls as (
    -- the calls whose replies were written, the chained stages' included
    select c.stage, c.secs from changed c where c.ok
    union all
    select e ->> 'stage', least(greatest((e -> 'cost_ms')::numeric, 0), v_ended_ms)::float8 / 1000
    from changed c cross join jsonb_array_elements(c.passed -> 'log') e(e)
    where c.passed is not null
  ), {{> finish_end}};
  end if;
  perform asyncflow.notify_waiters(v_task_type, p_shards, p_ids); -- see 47_task_waiters.sql
  -- Tasks that went on to their next stage are ready for any worker of the type (one NOTIFY).
  if array_position(p_outcomes, 'advance') is not null then
    perform asyncflow.wake(v_task_type);
  end if;
end
$body$;
