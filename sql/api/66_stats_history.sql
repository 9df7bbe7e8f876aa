-- The history of the per-type figures: maintenance samples the counters every few seconds into
-- a ring of minute points (a day) and a ring of hour points (31 days); the dashboard reads them.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- sample_stats: one sample at p_now. Per type, what succeeded, failed and was retried since the
-- last sample (from the monotonic counters) is added to the minute and hour points p_now falls
-- in, and ready, running and the lag are set on them. A ring slot still holding a point of an
-- earlier turn is overwritten: old points go whole. A sample older than the point in its slot
-- changes nothing there. Locks: stats_last in SHARE ROW EXCLUSIVE mode, so two samplers (a
-- leader stepping down beside its successor) take turns and count each increase once. Folds
-- the status deltas first. Returns the points written.
create or replace function asyncflow.sample_stats(p_now timestamptz default null) returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_epoch double precision := extract(epoch from v_now);
  v_points integer;
begin
  lock table asyncflow.stats_last in share row exclusive mode;
  perform asyncflow.fold_status_deltas();
  create temporary table if not exists stats_sample (task_type text, succeeded bigint, failed bigint,
    retried bigint, d_succeeded bigint, d_failed bigint, d_retried bigint, ready bigint, running bigint,
    lag_seconds double precision) on commit drop;
  truncate stats_sample;
  insert into stats_sample
  select q.task_type, c.succeeded, c.failed, c.retried,
    -- a type's first sample counts from itself: what happened before the sampler is not dated
    greatest(c.succeeded - coalesce(l.succeeded, c.succeeded), 0),
    greatest(c.failed - coalesce(l.failed, c.failed), 0),
    greatest(c.retried - coalesce(l.retried, c.retried), 0),
    q.ready, q.running, q.oldest_ready_age
  from asyncflow.queue_depth q
  left join (select k.task_type, sum(k.succeeded)::bigint as succeeded, sum(k.failed)::bigint as failed,
      sum(k.retried)::bigint as retried
    from asyncflow.type_counters k group by k.task_type) c0 on c0.task_type = q.task_type
  cross join lateral (select coalesce(c0.succeeded, 0) as succeeded, coalesce(c0.failed, 0) as failed,
    coalesce(c0.retried, 0) as retried) c
  left join asyncflow.stats_last l on l.task_type = q.task_type;

  insert into asyncflow.stats_points as p (task_type, resolution, slot, at, succeeded, failed, retried, ready,
    running, lag_seconds)
  select s.task_type, r.resolution, (floor(v_epoch / r.resolution)::bigint % r.slots)::integer,
    to_timestamp(floor(v_epoch / r.resolution) * r.resolution), s.d_succeeded, s.d_failed, s.d_retried, s.ready,
    s.running, s.lag_seconds
  from stats_sample s cross join (values (60, 1440), (3600, 744)) r(resolution, slots)
  on conflict (task_type, resolution, slot) do update set
    succeeded = case when p.at = excluded.at then p.succeeded + excluded.succeeded else excluded.succeeded end,
    failed = case when p.at = excluded.at then p.failed + excluded.failed else excluded.failed end,
    retried = case when p.at = excluded.at then p.retried + excluded.retried else excluded.retried end,
    at = excluded.at, ready = excluded.ready, running = excluded.running, lag_seconds = excluded.lag_seconds
  where p.at <= excluded.at;
  get diagnostics v_points = row_count;

  insert into asyncflow.stats_last as l (task_type, at, succeeded, failed, retried)
  select s.task_type, v_now, s.succeeded, s.failed, s.retried from stats_sample s
  on conflict (task_type) do update set at = excluded.at, succeeded = excluded.succeeded,
    failed = excluded.failed, retried = excluded.retried;
  return v_points;
end
$$;

-- stats_history: the points of one type (p_task_type) or of all types summed (null: counts
-- and gauges added, the lag the greatest), over the last hour or day (minute points) or month
-- (30 days of hour points), oldest first. An unknown type raises AF001, an unknown range AF006.
create or replace function asyncflow.stats_history(p_task_type text, p_range text, p_now timestamptz default null)
returns table (at timestamptz, succeeded bigint, failed bigint, retried bigint, ready bigint, running bigint,
  lag_seconds double precision)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_resolution integer;
  v_span interval;
begin
  case p_range
    when 'hour' then v_resolution := 60; v_span := interval '1 hour';
    when 'day' then v_resolution := 60; v_span := interval '1 day';
    when 'month' then v_resolution := 3600; v_span := interval '30 days';
    else perform asyncflow.raise_error('AF006', format('range must be one of hour, day, month, got %L', p_range));
  end case;
  if p_task_type is not null and not exists (select 1 from asyncflow.task_types y where y.task_type = p_task_type) then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  return query
  select p.at, sum(p.succeeded)::bigint, sum(p.failed)::bigint, sum(p.retried)::bigint, sum(p.ready)::bigint,
    sum(p.running)::bigint, max(p.lag_seconds)
  from asyncflow.stats_points p
  where p.resolution = v_resolution and (p_task_type is null or p.task_type = p_task_type)
    and p.at > v_now - v_span and p.at <= v_now
  group by p.at order by p.at;
end
$$;
