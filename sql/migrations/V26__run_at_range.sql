-- run_at is refused (AF006) before 4713-11-24 BC, a year after the earliest timestamp PostgreSQL
-- holds: the queue orders a task at run_at less its priority (at most 360 days), which for an
-- earlier run_at is no timestamp, and create_task and create_tasks failed with a raw 22008
-- ("timestamp out of range") instead of AF006 naming the field. create_task checks the range
-- itself (V25); create_tasks through is_timestamptz, replaced here: a text that casts to a finite
-- timestamptz from that day on.
create or replace function asyncflow.is_timestamptz(p_text text) returns boolean
language plpgsql stable as $$
begin
  return isfinite(p_text::timestamptz) and p_text::timestamptz >= '4713-11-24 00:00:00+00 BC';
exception when others then
  return false;
end
$$;
