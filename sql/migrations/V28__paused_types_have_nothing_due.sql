-- V28: a paused type has nothing due, and resuming it wakes its workers.
--
-- next_due told a worker that a paused type's pending tasks were ready: its producer claimed,
-- found nothing (claims skip paused types), asked again and was told "ready now", so it looked
-- again at once (every hold window with held claims, back to back without them: thousands of
-- statements a second for one paused type), and an `--exit-when-idle` worker never exited while
-- a paused type had pending tasks. Now next_due is null while the type is paused, like a type
-- with nothing pending. Since workers then wait for a wake-up (or their poll), resuming a type
-- (paused going from true to false, by register_task_type / `asyncflow type resume` or an UPDATE)
-- wakes them, as an insert would.

create or replace function asyncflow.next_due(p_task_type text) returns timestamptz
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select min(order_time) from asyncflow.tasks
  where task_type = p_task_type and status = 'pending'
    and shard >= (select begin_pos from asyncflow.positions where task_type = p_task_type)
    and not (select y.paused from asyncflow.task_types y where y.task_type = p_task_type)
$$;

create function asyncflow.tg_task_types__resumed() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform asyncflow.wake(new.task_type);
  return null;
end
$$;
revoke all on function asyncflow.tg_task_types__resumed() from public;

create trigger tg_task_types__resumed after update of paused on asyncflow.task_types
  for each row when (old.paused and not new.paused) execute function asyncflow.tg_task_types__resumed();
