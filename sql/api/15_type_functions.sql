-- The functions generated for each task type from the templates in sql/api/templates/ (kept in
-- asyncflow.function_templates by `asyncflow migrate`):
--
--   type_claim__<type>    claim_plain.sql, or claim_fair.sql for a type with fair_queues
--   type_hold__<type>     hold.sql     a held claim (row locks until the calls reply), or
--                         claim_fair.sql's hold variant for a type with fair_queues
--   type_finish__<type>   finish.sql   ends a hold
--   type_report__<type>   report.sql   reports as typed arrays
--   type_end_waits__<type> end_waits.sql  waiting tasks go on (an event, a timeout: 45_events.sql)
--
-- What several templates share (the start of a claim, its limit check, the claim's answer
-- columns, the counter and stage-time updates) is written once in sql/api/templates/fragments/
-- and put in by build.rs where a template says `{{> name}}`: the stored templates are expanded.
--
-- Each is planned on its own type's table and indexes only, so a plan made for one type is never
-- used for another (a generic plan over the partitioned parent would walk every type).

-- The text of template p_name for type p_task_type: {{task_type}} becomes the type's name as a
-- literal, {{tasks}} its table, {{claim}}, {{hold}}, {{finish}}, {{report}} and {{end_waits}} its
-- functions;
-- every identifier is quoted, and the type name has passed check_type_name. A template may hold
-- two variants: a line ending in --@claim is kept only in the 'claim' variant, one ending in
-- --@hold only in the 'hold' variant (claim_fair.sql is both a type's claim and its hold).
create or replace function asyncflow.render_template(p_name text, p_task_type text, p_variant text default 'claim')
returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
  v_body text;
begin
  perform asyncflow.check_type_name(p_task_type);
  if p_variant is null or p_variant not in ('claim', 'hold') then
    raise exception 'template variant must be claim or hold, not %', coalesce(p_variant, 'null');
  end if;
  select body into v_body from asyncflow.function_templates where name = p_name;
  if not found then
    raise exception 'function template % is missing: run asyncflow migrate', p_name;
  end if;
  -- the other variant's lines go, and the markers of this one
  v_body := regexp_replace(v_body, '^[^\n]*--@' || case when p_variant = 'claim' then 'hold' else 'claim' end
    || '[ \t]*\n', '', 'gn');
  v_body := regexp_replace(v_body, '[ \t]*--@' || p_variant || '[ \t]*$', '', 'gn');
  return replace(replace(replace(replace(replace(replace(replace(v_body,
    '{{task_type}}', format('%L', p_task_type)),
    '{{tasks}}', format('%I', 'tasks_' || p_task_type)),
    '{{claim}}', format('%I', 'type_claim__' || p_task_type)),
    '{{hold}}', format('%I', 'type_hold__' || p_task_type)),
    '{{finish}}', format('%I', 'type_finish__' || p_task_type)),
    '{{report}}', format('%I', 'type_report__' || p_task_type)),
    '{{end_waits}}', format('%I', 'type_end_waits__' || p_task_type));
end
$$;

-- (Re)creates a type's claim, report, hold, finish and end_waits functions from the templates, the
-- first four executable by asyncflow_worker only, the last by no one but their owner (it is
-- called by the security definer functions of sql/api/45_events.sql). Called when a type is registered or its fair_queues setting changes,
-- and by `asyncflow migrate` for every type after it applies new templates.
create or replace function asyncflow.create_type_functions(p_task_type text) returns void
language plpgsql as $$
declare
  v_fair boolean;
  v_old text;
begin
  perform asyncflow.check_type_name(p_task_type);
  select fair_queues into v_fair from asyncflow.task_types where task_type = p_task_type;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  execute asyncflow.render_template(case when v_fair then 'claim_fair' else 'claim_plain' end, p_task_type);
  -- a report function of an earlier build, with other arguments, is dropped (its callers reach
  -- the new one: its last argument has a default)
  for v_old in select p.oid::regprocedure::text from pg_catalog.pg_proc p
    where p.pronamespace = 'asyncflow'::regnamespace and p.proname = 'type_report__' || p_task_type
      and p.pronargs <> 12
  loop
    execute 'drop function ' || v_old;
  end loop;
  execute asyncflow.render_template('report', p_task_type);
  if v_fair then
    execute asyncflow.render_template('claim_fair', p_task_type, 'hold');
  else
    execute asyncflow.render_template('hold', p_task_type);
  end if;
  -- a finish of an earlier build, with other arguments, is dropped (callers of the 9-argument
  -- form reach the new one: its last argument has a default)
  for v_old in select p.oid::regprocedure::text from pg_catalog.pg_proc p
    where p.pronamespace = 'asyncflow'::regnamespace and p.proname = 'type_finish__' || p_task_type
      and p.pronargs <> 10
  loop
    execute 'drop function ' || v_old;
  end loop;
  execute asyncflow.render_template('finish', p_task_type);
  execute asyncflow.render_template('end_waits', p_task_type);
  execute format('revoke all on function asyncflow.%I(integer[], bigint[], jsonb[], timestamptz) from public',
    'type_end_waits__' || p_task_type);
  execute format('revoke all on function asyncflow.%I(text, integer, timestamptz) from public',
    'type_claim__' || p_task_type);
  execute format('grant execute on function asyncflow.%I(text, integer, timestamptz) to asyncflow_worker',
    'type_claim__' || p_task_type);
  execute format('revoke all on function asyncflow.%I(text, text[], bigint[], text[], text[], jsonb[], jsonb[], '
    'text[], boolean[], double precision[], timestamptz, jsonb[]) from public', 'type_report__' || p_task_type);
  execute format('grant execute on function asyncflow.%I(text, text[], bigint[], text[], text[], jsonb[], jsonb[], '
    'text[], boolean[], double precision[], timestamptz, jsonb[]) to asyncflow_worker', 'type_report__' || p_task_type);
  execute format('revoke all on function asyncflow.%I(text, integer) from public', 'type_hold__' || p_task_type);
  execute format('grant execute on function asyncflow.%I(text, integer) to asyncflow_worker',
    'type_hold__' || p_task_type);
  execute format('revoke all on function asyncflow.%I(text, integer[], bigint[], bigint[], text[], jsonb[], text[], '
    'jsonb[], double precision[], jsonb[]) from public', 'type_finish__' || p_task_type);
  execute format('grant execute on function asyncflow.%I(text, integer[], bigint[], bigint[], text[], jsonb[], text[], '
    'jsonb[], double precision[], jsonb[]) to asyncflow_worker', 'type_finish__' || p_task_type);
end
$$;

-- After insert on task_types, and after an update of fair_queues (the claim changes template).
create or replace function asyncflow.tg_task_types__functions() returns trigger
language plpgsql as $$
begin
  perform asyncflow.create_type_functions(new.task_type);
  return null;
end
$$;
