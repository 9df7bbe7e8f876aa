-- Rate limits: at most max_starts claims (task starts) per period seconds for a task type,
-- across all workers. A token bucket in asyncflow.rate_limits: max_starts tokens, refilled at
-- max_starts / period per second; a claim takes at most the whole tokens there are and spends
-- one per task it claimed. The bucket's row is locked by the claim's update until it commits,
-- so concurrent claims of the type take their turns and never overspend. A type without a limit
-- (task_types.rate_limited false) reads nothing of this.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- set_rate_limit: limits the type to max_starts starts per period seconds (default 1), or
-- removes its limit (max_starts null). Returns {task_type, max_starts, period}.
create or replace function asyncflow.set_rate_limit(task_type text, max_starts integer, period double precision default 1,
  p_now timestamptz default null) returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
begin
  if not exists (select 1 from asyncflow.task_types y where y.task_type = $1) then
    perform asyncflow.check_type_name($1);
    perform asyncflow.raise_error('AF001', format('unknown task type %L', $1));
  end if;
  if max_starts is null then
    delete from asyncflow.rate_limits r where r.task_type = $1;
    update asyncflow.task_types y set rate_limited = false where y.task_type = $1 and y.rate_limited;
    return jsonb_build_object('task_type', $1, 'max_starts', null, 'period', null);
  end if;
  if max_starts not between 1 and 1000000 then
    perform asyncflow.raise_error('AF006', format('max_starts must be between 1 and 1000000, got %s', max_starts));
  elsif period is null or period = 'NaN' or period not between 0.001 and 86400 then
    perform asyncflow.raise_error('AF006', format('period must be between 0.001 and 86400 seconds, got %s', period));
  end if;
  insert into asyncflow.rate_limits as r (task_type, max_starts, period, tokens, refilled_at, updated_at)
  values ($1, max_starts, period, max_starts, v_now, v_now)
  on conflict on constraint rate_limits_pkey do update set max_starts = excluded.max_starts, period = excluded.period,
    tokens = least(r.tokens, excluded.max_starts), updated_at = excluded.updated_at;
  update asyncflow.task_types y set rate_limited = true where y.task_type = $1 and not y.rate_limited;
  return jsonb_build_object('task_type', $1, 'max_starts', max_starts, 'period', period);
end
$$;

-- rate_allowance (claims): refills the type's bucket to p_now and returns how many tasks the
-- claim may start (null: the type has no bucket). Locks the bucket's row until the claim ends.
create or replace function asyncflow.rate_allowance(p_task_type text, p_now timestamptz) returns integer
language sql as $$
  update asyncflow.rate_limits r set
    tokens = least(r.max_starts::double precision,
      r.tokens + greatest(0, date_part('epoch', p_now - r.refilled_at)) * r.max_starts / r.period),
    refilled_at = greatest(r.refilled_at, p_now)
  where r.task_type = p_task_type
  returning floor(r.tokens)::integer
$$;

-- rate_spend (claims): spends one token per task the claim started.
create or replace function asyncflow.rate_spend(p_task_type text, p_started integer) returns void
language sql as $$
  update asyncflow.rate_limits r set tokens = r.tokens - p_started where r.task_type = p_task_type and p_started > 0
$$;
