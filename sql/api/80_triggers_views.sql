-- Triggers on the schema's own tables, and the views: code, so they live here with the functions
-- they run (`create or replace`).

-- A new type gets its own claim, hold, finish and report functions; a type whose fair_queues
-- setting changes gets the other claim.
create or replace trigger tg_task_types__functions after insert on asyncflow.task_types
  for each row execute function asyncflow.tg_task_types__functions();
create or replace trigger tg_task_types__fair_queues after update of fair_queues on asyncflow.task_types
  for each row when (old.fair_queues is distinct from new.fair_queues)
  execute function asyncflow.tg_task_types__functions();

-- asyncflow.enqueue_info follows the three tables it summarises.
create or replace trigger tg_task_types__enqueue_info after insert or update on asyncflow.task_types
  for each row execute function asyncflow.tg_enqueue_info();
create or replace trigger tg_positions__enqueue_info after insert or update of end_pos on asyncflow.positions
  for each row execute function asyncflow.tg_enqueue_info();
create or replace trigger tg_positions__enqueue_info_gone after delete or truncate on asyncflow.positions
  for each statement execute function asyncflow.tg_enqueue_info();
create or replace trigger tg_config__enqueue_info after insert or update or delete or truncate on asyncflow.config
  for each statement execute function asyncflow.tg_enqueue_info();

-- A resumed type wakes its workers.
create or replace trigger tg_task_types__resumed after update of paused on asyncflow.task_types
  for each row when (old.paused and not new.paused) execute function asyncflow.tg_task_types__resumed();

-- Per type: ready (due now), delayed, running, the oldest ready task's age (seconds since it
-- became ready: the later of its order_time and its last change, so that priority, which moves
-- order_time back, does not count as waiting), paused, and
-- held: pending tasks of a fair type's held queue keys (a limit of 0), which no claim takes and
-- which are not counted as ready or delayed.
create or replace view asyncflow.queue_depth as
select y.task_type,
  coalesce(p.ready, 0) as ready,
  coalesce(p.delayed, 0) as delayed,
  coalesce(r.running, 0) as running,
  coalesce(extract(epoch from (now() - p.oldest_ready)), 0)::double precision as oldest_ready_age,
  y.paused,
  coalesce(p.held, 0) as held
from asyncflow.task_types y
left join lateral (
  select count(*) filter (where not h.held and t.order_time <= now()) as ready,
         count(*) filter (where not h.held and t.order_time > now()) as delayed,
         min(greatest(t.order_time, t.updated_at))
           filter (where not h.held and t.order_time <= now()) as oldest_ready,
         count(*) filter (where h.held) as held
  from asyncflow.tasks t
  cross join lateral (
    select y.fair_queues and exists (select 1 from asyncflow.queue_limits l where l.task_type = y.task_type
      and l.concurrency = 0 and l.queue_key = coalesce(t.queue_key, '')) as held) h
  where t.task_type = y.task_type and t.status = 'pending'
) p on true
left join lateral (
  select count(*) as running from asyncflow.tasks t where t.task_type = y.task_type and t.status = 'running'
) r on true;
