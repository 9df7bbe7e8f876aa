-- Plans made once per connection on the hot paths.
--
-- Generic plans for the worker's calls. PL/pgSQL keeps planning a statement anew at every call
-- while its custom plans look cheaper than a generic one, and a statement on the partitioned
-- tasks table always does (a custom plan prunes partitions while planning). So claim_tasks was
-- planned at every call: for a worker woken for one task, about 0.4 ms of a 0.9 ms claim on this
-- machine, on the path from an insert to the function's start. A generic plan, made once per
-- connection, prunes the same partitions when the executor starts (task_type = $1 and
-- shard >= begin_pos are known by then); the report's update never prunes at planning (its task
-- types come from the reports), so planning it each time only cost time.
alter function asyncflow.claim_tasks(text, text, integer, timestamptz) set plan_cache_mode = force_generic_plan;
alter function asyncflow.report_task_arrays(text, text[], integer[], text[], text[], jsonb[], jsonb[], text[],
  boolean[], double precision[], timestamptz) set plan_cache_mode = force_generic_plan;

-- wake in PL/pgSQL. As a SQL function with a WHERE clause it could not be inlined, and a SQL
-- function that is not inlined is parsed and planned again at every call: in create_task, one
-- per enqueue, that was about a tenth of the server's time (create_task one per transaction from
-- 8 connections: about 5,000/s before, 6,400/s after on this machine). A PL/pgSQL body keeps its
-- one expression's plan for the session. Same behaviour: only the transaction that wins the
-- per-type try-lock notifies (see V3).
create or replace function asyncflow.wake(p_task_type text) returns void
language plpgsql as $$
begin
  if pg_try_advisory_xact_lock(16712, hashtext(p_task_type)) then
    perform pg_notify('asyncflow', p_task_type);
  end if;
end
$$;
