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

-- A join's count that reaches its total starts the join (46_children.sql).
create or replace trigger tg_joins__ended after update of ended on asyncflow.joins
  for each row when (new.children is not null and new.ended >= new.total and old.ended < old.total)
  execute function asyncflow.tg_joins__ended();

-- Per type: ready (due now), delayed, running, the oldest ready task's age (seconds since it
-- became ready: the later of its order_time and its last change, so that priority, which moves
-- order_time back, does not count as waiting), paused, and
-- held: pending tasks of a fair type's held queue keys (a limit of 0), which no claim takes and
-- which are not counted as ready or delayed.
-- Cheap at any number of tasks: pending and running come from the counters (status_counts);
-- only delayed and held tasks are counted, through the pending indexes; the oldest ready task
-- is found from the first one in order_time order (a task further on has an order_time, so a
-- readiness, later than that one's).
-- The body is a function so that it can turn JIT off: its estimates grow with the tasks
-- stored, and compiling the plan cost far more than running it (a second against 5 ms).
create or replace function asyncflow.queue_depth_rows()
returns table (task_type text, ready bigint, delayed bigint, running bigint, oldest_ready_age double precision,
  paused boolean, held bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp set jit = off as $$
select y.task_type,
  greatest(n.pending - d.delayed - h.held, 0) as ready,
  d.delayed,
  n.running,
  coalesce(extract(epoch from (now() - o.oldest_ready)), 0)::double precision as oldest_ready_age,
  y.paused,
  h.held
from asyncflow.task_types y
join asyncflow.status_counts() n on n.task_type = y.task_type
cross join lateral (
  select count(*) as held from asyncflow.queue_limits l
  join asyncflow.tasks t on t.task_type = l.task_type and coalesce(t.queue_key, '') = l.queue_key
  where y.fair_queues and l.task_type = y.task_type and l.concurrency = 0 and t.status = 'pending'
) h
cross join lateral (
  select count(*) as delayed from asyncflow.tasks t
  where t.task_type = y.task_type and t.status = 'pending' and t.order_time > now()
    and not (y.fair_queues and exists (select 1 from asyncflow.queue_limits l where l.task_type = y.task_type
      and l.concurrency = 0 and l.queue_key = coalesce(t.queue_key, '')))
) d
cross join lateral (
  with first as (
    select greatest(t.order_time, t.updated_at) as ready_at from asyncflow.tasks t
    where t.task_type = y.task_type and t.status = 'pending' and t.order_time <= now()
      and not (y.fair_queues and exists (select 1 from asyncflow.queue_limits l where l.task_type = y.task_type
        and l.concurrency = 0 and l.queue_key = coalesce(t.queue_key, '')))
    order by t.order_time limit 1
  )
  select min(greatest(t.order_time, t.updated_at)) as oldest_ready from asyncflow.tasks t
  where t.task_type = y.task_type and t.status = 'pending' and t.order_time <= least(now(), (select ready_at from first))
    and not (y.fair_queues and exists (select 1 from asyncflow.queue_limits l where l.task_type = y.task_type
      and l.concurrency = 0 and l.queue_key = coalesce(t.queue_key, '')))
) o
$$;

create or replace view asyncflow.queue_depth as
select q.task_type, q.ready, q.delayed, q.running, q.oldest_ready_age, q.paused, q.held
from asyncflow.queue_depth_rows() q;
