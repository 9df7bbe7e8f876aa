-- A report's answer, one row per report in order: accepted when `changed` (n, status,
-- lease_until) has it, else the task's current status, looked up only for those.
select r.n, r.task_id, c.n is not null,
    case when c.n is null then (select s.status from asyncflow.{{tasks}} s
      where s.shard = r.shard and s.id = r.id)
      else c.status end,
    c.lease_until
  from r
  left join changed c on c.n = r.n
  order by r.n
