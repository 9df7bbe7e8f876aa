-- The CTE `timed`: per_bucket's calls (stage, k: the bucket, n: calls, secs: their seconds)
-- added to the stage-time histogram (asyncflow.stage_times), every bucket of a stage in one row.
timed as (
    insert into asyncflow.stage_times as s (task_type, stage, slot, calls, seconds, buckets)
    select v_task_type, t.stage, pg_backend_pid() % 16, sum(coalesce(g.n, 0)), sum(coalesce(g.secs, 0)),
      array_agg(coalesce(g.n, 0) order by x.k)
    from (select distinct stage from per_bucket) t
    cross join generate_series(0, cardinality(asyncflow.stage_time_bounds())) x(k)
    left join per_bucket g on g.stage = t.stage and g.k = x.k
    group by t.stage
    on conflict (task_type, stage, slot) do update set calls = s.calls + excluded.calls,
      seconds = s.seconds + excluded.seconds,
      buckets = array(select a + b from unnest(s.buckets, excluded.buckets) with ordinality u(a, b, i) order by i)
  )
