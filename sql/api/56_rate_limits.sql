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

-- Rate limits per queue key of a type with fair_queues: a limit for every key of the type
-- (task_types.queue_max_starts per queue_rate_period) and/or a key's own limit, each key with a
-- token bucket of its own in asyncflow.queue_rate_limits, refilled and spent by the fair claim
-- like the type's bucket above. A key's own limit takes the place of the limit for every key.
-- The fair claim of a type with such a limit (task_types.queue_rate_limited) takes the type's
-- claim lock, as per-key concurrency limits do, so its claimers spend the buckets one at a time.

-- set_queue_rate_limit: limits one queue key (p_queue_key; '' for the tasks without a key), or
-- every key of the type (p_queue_key null), to p_max_starts starts per p_period seconds, or
-- removes that limit (p_max_starts null). Returns the limit that now applies to the key (to
-- every key without a limit of its own, for p_queue_key null): {task_type, queue_key,
-- max_starts, period}, max_starts and period null for none. Only for a type with fair_queues (no
-- other claim reads it). Wakes the type's workers. Errors: AF001, AF003, AF006; nothing changed.
create or replace function asyncflow.set_queue_rate_limit(p_task_type text, p_queue_key text, p_max_starts integer,
  p_period double precision default 1, p_now timestamptz default null) returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_type asyncflow.task_types;
  v_own asyncflow.queue_rate_limits;
begin
  select * into v_type from asyncflow.task_types y where y.task_type = p_task_type collate "default" for update;
  if not found then
    perform asyncflow.check_type_name(p_task_type);
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  if length(p_queue_key) > 255 then
    perform asyncflow.raise_error('AF006', format('queue_key must be a string of at most 255 characters '
      '('''' for the tasks without a key, null for every key), got %s', to_jsonb(p_queue_key)));
  end if;
  if p_max_starts not between 1 and 1000000 then
    perform asyncflow.raise_error('AF006', format('max_starts must be between 1 and 1000000, got %s', p_max_starts));
  elsif p_max_starts is not null and (p_period is null or p_period = 'NaN' or p_period not between 0.001 and 86400) then
    perform asyncflow.raise_error('AF006',
      format('period must be between 0.001 and 86400 seconds, got %s', coalesce(p_period::text, 'null')));
  end if;
  if not v_type.fair_queues then
    perform asyncflow.raise_error('AF006', format('task type %L does not have fair_queues: no claim would read '
      'a rate limit per queue key', v_type.task_type));
  end if;
  if p_queue_key is null then
    update asyncflow.task_types y set queue_max_starts = p_max_starts,
      queue_rate_period = case when p_max_starts is not null then p_period end
    where y.task_type = v_type.task_type;
    -- the keys' buckets start over under the new limit: a key under a lower limit keeps no more
    -- tokens than it allows, and without a limit for every key only the keys' own buckets stay
    if p_max_starts is null then
      delete from asyncflow.queue_rate_limits r where r.task_type = v_type.task_type and r.max_starts is null;
    else
      update asyncflow.queue_rate_limits r set tokens = least(r.tokens, p_max_starts), updated_at = v_now
      where r.task_type = v_type.task_type and r.max_starts is null;
    end if;
  elsif p_max_starts is null then
    -- the key's own bucket goes; the limit for every key, if any, starts it again full
    delete from asyncflow.queue_rate_limits r
    where r.task_type = v_type.task_type and r.queue_key = p_queue_key collate "default";
  else
    insert into asyncflow.queue_rate_limits as r (task_type, queue_key, max_starts, period, tokens, refilled_at, updated_at)
    values (v_type.task_type, p_queue_key collate "default", p_max_starts, p_period, p_max_starts, v_now, v_now)
    on conflict (task_type, queue_key) do update set max_starts = excluded.max_starts, period = excluded.period,
      tokens = least(r.tokens, excluded.max_starts), updated_at = excluded.updated_at;
  end if;
  update asyncflow.task_types y set queue_rate_limited = y.queue_max_starts is not null
    or exists (select 1 from asyncflow.queue_rate_limits r where r.task_type = y.task_type and r.max_starts is not null)
  where y.task_type = v_type.task_type
  returning * into v_type;
  if not v_type.queue_rate_limited then
    delete from asyncflow.queue_rate_limits r where r.task_type = v_type.task_type;
  end if;
  perform asyncflow.wake(v_type.task_type);
  if p_queue_key is not null then
    select * into v_own from asyncflow.queue_rate_limits r
    where r.task_type = v_type.task_type and r.queue_key = p_queue_key collate "default" and r.max_starts is not null;
    if found then
      return jsonb_build_object('task_type', v_type.task_type, 'queue_key', p_queue_key,
        'max_starts', v_own.max_starts, 'period', v_own.period);
    end if;
  end if;
  return jsonb_build_object('task_type', v_type.task_type, 'queue_key', p_queue_key,
    'max_starts', v_type.queue_max_starts, 'period', v_type.queue_rate_period);
end
$$;

-- queue_rate_allowance (fair claims): refills the buckets of the keys p_keys that have a rate
-- limit to p_now (making those the type's limit for every key needs, full) and returns how many
-- tasks the claim may start of each; keys without a limit are not returned. The bucket rows stay
-- locked until the claim ends.
create or replace function asyncflow.queue_rate_allowance(p_type asyncflow.task_types, p_keys text[],
  p_now timestamptz) returns table (queue_key text, allowance integer)
language plpgsql as $$
#variable_conflict use_column
begin
  if p_type.queue_max_starts is not null then
    insert into asyncflow.queue_rate_limits (task_type, queue_key, tokens, refilled_at, updated_at)
    select p_type.task_type, k, p_type.queue_max_starts, p_now, p_now from unnest(p_keys) k
    on conflict (task_type, queue_key) do nothing;
  end if;
  return query
  update asyncflow.queue_rate_limits r set
    tokens = least(coalesce(r.max_starts, p_type.queue_max_starts)::double precision,
      r.tokens + greatest(0, date_part('epoch', p_now - r.refilled_at))
        * coalesce(r.max_starts, p_type.queue_max_starts) / coalesce(r.period, p_type.queue_rate_period)),
    refilled_at = greatest(r.refilled_at, p_now)
  where r.task_type = p_type.task_type and r.queue_key = any (p_keys)
    and coalesce(r.max_starts, p_type.queue_max_starts) is not null
  returning r.queue_key, floor(r.tokens)::integer;
end
$$;

-- queue_rate_spend (fair claims): spends one token of its key's bucket per task the claim
-- started (p_keys: the started tasks' keys, one per task).
create or replace function asyncflow.queue_rate_spend(p_task_type text, p_keys text[]) returns void
language sql as $$
  update asyncflow.queue_rate_limits r set tokens = r.tokens - s.n
  from (select k, count(*) as n from unnest(p_keys) k group by k) s
  where r.task_type = p_task_type and r.queue_key = s.k
$$;

-- prune_rate_buckets (maintenance): removes the buckets, under a type's limit for every key, that
-- have refilled completely by p_now: a missing bucket is a
-- full one, which the key's next claim makes anew, so a type whose keys come and go keeps rows
-- only for the keys claimed within the last period. Each type's buckets go under its fair claim's
-- lock, tried (a type being claimed at that moment is passed over until the next pass), so no
-- claim finds a bucket gone between making it and spending it; a bucket row another transaction
-- holds is passed over too, so a pass never waits. Keys' own limits stay. Returns how many rows
-- went.
create or replace function asyncflow.prune_rate_buckets(p_now timestamptz default null) returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now constant timestamptz := asyncflow.check_now(p_now);
  v_type record;
  v_n integer;
  v_total integer := 0;
begin
  for v_type in select t.task_type, t.queue_max_starts, t.queue_rate_period from asyncflow.task_types t
    where t.queue_max_starts is not null order by t.task_type
  loop
    if pg_try_advisory_xact_lock(16713, hashtext(v_type.task_type)) then
      -- full: refilled to p_now (as queue_rate_allowance would), at least the limit; a bucket
      -- another transaction has locked (set_queue_rate_limit on its key, still open) is passed
      -- over, never waited for: the pass would hold the claim locks it took meanwhile
      delete from asyncflow.queue_rate_limits r
      where (r.task_type, r.queue_key) in (
        select b.task_type, b.queue_key from asyncflow.queue_rate_limits b
        where b.task_type = v_type.task_type and b.max_starts is null
          and b.tokens + greatest(0, date_part('epoch', v_now - b.refilled_at)) * v_type.queue_max_starts
            / v_type.queue_rate_period >= v_type.queue_max_starts
        for update skip locked);
      get diagnostics v_n = row_count;
      v_total := v_total + v_n;
    end if;
  end loop;
  return v_total;
end
$$;
