-- report_tasks (V16) refuses a delay outside 0 .. 31536000 s by itself, with report_task_arrays'
-- message, and reads it as numeric, to the microsecond. Before, a JSON number beyond a double
-- precision's range (1e400, -1e400, and 1e-400, which underflows) failed the cast in
-- jsonb_to_recordset with a raw 22003 instead of AF006 naming the report. Replaced whole (the
-- migration convention); the delay's check line and its reading are what is new.
create or replace function asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamptz default null)
returns table (task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
#variable_conflict use_column
declare
  v_bad record;
  v record;
begin
  if p_reports is null or jsonb_typeof(p_reports) <> 'array' then
    perform asyncflow.raise_error('AF006', 'reports must be a JSON array of objects');
  end if;
  -- Only what the typed fields need here (each field of its JSON type, claim_seq an integer);
  -- report_task_arrays checks the values, with the same messages.
  select n, problem into v_bad from (
    select n, case
      when jsonb_typeof(e) <> 'object' then 'must be a JSON object'
      when jsonb_typeof(e -> 'task_id') is distinct from 'string' then 'task_id must be a string'
      when jsonb_typeof(e -> 'claim_seq') is distinct from 'number' or (e ->> 'claim_seq') !~ '^-?[0-9]{1,9}$'
        then format('claim_seq must be an integer, got %s', e -> 'claim_seq')
      when jsonb_typeof(e -> 'outcome') is distinct from 'string'
        then format('outcome must be one of advance, succeed, fail, later, release, heartbeat, got %s', e -> 'outcome')
      when jsonb_typeof(e -> 'delay') not in ('number', 'null') then 'delay must be a number of seconds'
      -- in numeric, which holds any JSON number: the double precision cast below cannot
      when (e ->> 'delay')::numeric not between 0 and 31536000
        then format('delay must be a number of seconds between 0 and 31536000, got %s', e -> 'delay')
      when jsonb_typeof(e -> 'error') not in ('string', 'null') then 'error must be a string'
      when jsonb_typeof(e -> 'stage') not in ('string', 'null') then 'stage must be a string'
      when jsonb_typeof(e -> 'retry') not in ('boolean', 'null') then 'retry must be true or false'
    end as problem
    from jsonb_array_elements(p_reports) with ordinality x(e, n)
  ) checked where problem is not null order by n limit 1;
  if found then
    perform asyncflow.raise_error('AF006', format('reports[%s]: %s', v_bad.n - 1, v_bad.problem));
  end if;

  -- one plain aggregate over the ordered scan: the arrays keep the reports' order
  select array_agg(x.task_id) as task_ids, array_agg(x.claim_seq) as claim_seqs,
    array_agg(x.outcome) as outcomes, array_agg(x.stage) as stages,
    array_agg(x.context) as contexts, array_agg(x.result) as results,
    array_agg(x.error) as errors, array_agg(x.retry) as retries,
    array_agg(round(x.delay, 6)::double precision) as delays
  into v
  from rows from (jsonb_to_recordset(p_reports) as (task_id text, claim_seq integer, outcome text, stage text,
    context jsonb, result jsonb, error text, retry boolean, delay numeric))
    with ordinality as x(task_id, claim_seq, outcome, stage, context, result, error, retry, delay, n);
  return query select * from asyncflow.report_task_arrays(p_owner, coalesce(v.task_ids, '{}'),
    coalesce(v.claim_seqs, '{}'), coalesce(v.outcomes, '{}'), v.stages, v.contexts, v.results, v.errors, v.retries,
    v.delays, p_now);
end
$$;
