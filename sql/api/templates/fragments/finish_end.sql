-- The end of a finish's statement, after `r` (n, shard, id, outcome, ok: the reply can be
-- written), `changed` (n, status, lease_until, parent_id: the rows written) and `calls` (stage,
-- secs: the calls whose replies were written): the children that ended, on their parents' joins;
-- the counters (held tasks were pending: an advance stays pending, the others leave it); the
-- stage-time histogram (as type_report__ keeps it); and the answers for the tasks that did not
-- end as asked.
{{> child_ends}}, counted as (
    insert into asyncflow.type_counters as k (task_type, slot, claimed, succeeded, in_pending, in_running, in_succeeded)
    select v_task_type, pg_backend_pid() % 16, count(*), count(*) filter (where c.status = 'succeeded'),
      -count(*) filter (where c.status <> 'pending'), count(*) filter (where c.status = 'running'),
      count(*) filter (where c.status = 'succeeded')
    from changed c having count(*) > 0
    {{> add_counts}}
  ), per_bucket as (
    select c.stage, d.k, count(*) as n, sum(c.secs) as secs
    from calls c
    cross join lateral (select {{> stage_bucket secs = c.secs}} as k) d
    group by c.stage, d.k
  ), {{> stage_times}}
  select r.n, asyncflow.format_task_id(v_task_type, r.shard, r.id), c.n is not null,
    case when c.n is null then (select s.status from asyncflow.{{tasks}} s where s.shard = r.shard and s.id = r.id)
      else c.status end,
    c.lease_until
  from r
  left join changed c on c.n = r.n
  where c.n is null or (r.outcome is not null and not r.ok)
  order by r.n
