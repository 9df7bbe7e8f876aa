-- cancel_run retries when it meets a report in a deadlock.
--
-- A worker's report locks its task's row and then, in the workflow trigger, its run's row;
-- cancel_run locks the run's row and then its tasks' rows. When a run is cancelled while one of
-- its tasks reports, each may wait for the other, and after deadlock_timeout the deadlock
-- detector ends one of them with 40P01. A worker retries its report by itself; cancel_run raised
-- 40P01 to its caller. It now makes each try in a savepoint of its own (a block with an
-- exception handler): a try ended by the detector gives its locks back, the report goes on, and
-- the next try, a moment later, ends the run; at most three tries. Replaced whole (the migration
-- convention, V12).
--
-- What the savepoint does not cover: locks the caller took earlier in its own transaction stay
-- held across the tries (if they are part of the deadlock, the three tries end in 40P01 after
-- three deadlock timeouts); in REPEATABLE READ or SERIALIZABLE the first 40P01 is raised at
-- once, as a retry there could only fail; each call opens a subtransaction (many calls in one
-- transaction make many); and a deadlock caught here is not logged as an error.
create or replace function asyncflow.cancel_run(run_id text, p_now timestamptz default null) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  v_run asyncflow.runs;
begin
  for v_try in 1..3 loop
    begin
      v_run := asyncflow.wf_run_for_update($1);
      if v_run.status not in ('scheduled', 'running') then
        return false;
      end if;
      perform asyncflow.wf_finish_run(v_run.run_id, 'cancelled', null, 'cancelled by hand', coalesce(p_now, now()));
      return true;
    exception when deadlock_detected then
      -- in REPEATABLE READ or SERIALIZABLE a try after a concurrent change cannot succeed
      if v_try = 3 or current_setting('transaction_isolation') <> 'read committed' then
        raise;
      end if;
      -- let the report that was waiting take the locks and finish first: trying again at once
      -- would lock the run before it and meet it again
      perform pg_sleep(0.05 * v_try);
    end;
  end loop;
  return false;
end
$$;
