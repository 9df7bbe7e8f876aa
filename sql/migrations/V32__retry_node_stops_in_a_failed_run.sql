-- V32: retry_node starts nothing more in a run that fails again while its nodes restart.
--
-- Retrying a node first runs again the nodes the failure had cancelled, then the node itself. When
-- one of them failed again at once (a sub-pipeline whose version was retired meanwhile, say), the
-- run was failed again, and the loop still went on: the retried node got a live task in a failed
-- run, and retry_node said true (found by a bug hunt). Now the loop stops once the run is no
-- longer running, and the result says whether it is running again. Replaced whole (the migration
-- convention); only the end changed.

CREATE OR REPLACE FUNCTION asyncflow.retry_node(run_id text, node text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
#variable_conflict use_column
declare
  v_run asyncflow.runs := asyncflow.wf_run_for_update($1);
  v_now timestamptz := coalesce(p_now, now());
  v_event asyncflow.run_events;
  v_other asyncflow.run_events;
begin
  select * into v_event from asyncflow.run_events e
  where e.day = v_run.day and e.event_id = v_run.run_id || '_' || $2 for update;
  if not found then
    perform asyncflow.wf_run_error('AF012', format('run %s has no node %s', v_run.run_id, coalesce(quote_literal($2), 'null')));
  end if;
  if v_event.status <> 'failed' then
    perform asyncflow.wf_run_error('AF013', format('node %s of run %s is %s: only a failed node can be retried',
      $2, v_run.run_id, v_event.status));
  end if;
  if v_run.status not in ('failed', 'timed_out') or v_run.retried_by is not null then
    perform asyncflow.wf_run_error('AF013', format('run %s is %s%s: a node can be retried only in a failed run',
      v_run.run_id, v_run.status, coalesce(' and was retried as ' || v_run.retried_by, '')));
  end if;
  if v_run.parent_event is not null then
    perform asyncflow.wf_run_error('AF013', format('run %s is a sub-pipeline run of event %s: retry that node instead',
      v_run.run_id, v_run.parent_event));
  end if;
  update asyncflow.runs r set status = 'running', result = null, error = null, finished_at = null, total_cost_ms = null,
    updated_at = v_now, deadline = v_now + make_interval(secs => (asyncflow.wf_plan(v_run) ->> 'timeout')::double precision)
  where r.day = v_run.day and r.run_id = v_run.run_id
  returning * into v_run;
  -- nodes that were only waiting wait again; the ones that were working run again
  update asyncflow.run_events e set status = 'waiting', cancelled_from = null, finished_at = null, updated_at = v_now
  where e.day = v_run.day and e.run_id = v_run.run_id and e.status = 'cancelled' and e.cancelled_from = 'waiting';
  for v_other in
    select * from asyncflow.run_events e
    where e.day = v_run.day and e.run_id = v_run.run_id and e.status = 'cancelled' order by e.event_id
  loop
    perform asyncflow.wf_rerun_event(v_run, v_other, v_now);
    -- (V32) a node that fails again at once fails the run again: nothing more is started in it
    exit when (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) <> 'running';
  end loop;
  if (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) = 'running' then
    perform asyncflow.wf_rerun_event(v_run, v_event, v_now);
  end if;
  -- true when the run is under way again; false when it failed again while its nodes restarted
  return (select r.status from asyncflow.runs r where r.day = v_run.day and r.run_id = v_run.run_id) = 'running';
end
$_$;
