-- The end of an insert into asyncflow.type_counters (alias k) of a change's counts: added to
-- the slot's row (a column the insert leaves out adds its default, 0).
on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed,
      succeeded = k.succeeded + excluded.succeeded, failed = k.failed + excluded.failed,
      retried = k.retried + excluded.retried, in_pending = k.in_pending + excluded.in_pending,
      in_running = k.in_running + excluded.in_running, in_succeeded = k.in_succeeded + excluded.in_succeeded,
      in_failed = k.in_failed + excluded.in_failed, in_waiting = k.in_waiting + excluded.in_waiting
