-- Bad input, mended (found by a review of the SQL API with bad input; each case is in
-- tests/sql_api.rs, bad_input_found_by_review_*):
--   * a new type whose tables would take another type's names (a type `t_1` and type t's shard 1
--     are both tasks_t_1; `t_id_seq`, `t_ready`, `t_running`, `t_pkey` likewise) failed at
--     registration with a raw 42P07, or worse, later: registering `u_2` first made type u unable
--     ever to roll to its shard 2. Such names are refused with AF003;
--   * settings written with a fraction of zero (`"schedule_limit": 1.0`), which check_settings
--     accepts, failed the integer cast with 22P02;
--   * create_tasks with an array among the tasks (`[[{}]]`) passed the lax jsonpath scan (lax
--     mode unwraps arrays in filters) and was inserted as a task, or failed in
--     jsonb_to_recordset;
--   * report_task_arrays / report_tasks with no report of a known type (an empty batch, a batch
--     of unknown types) failed with 42703 instead of answering;
--   * a run id with an impossible date (`r20241399-...`) failed with 22008 in run_day;
--   * a pipeline node's integer fields written with a fraction (priority, timeout_retries,
--     max_segments, version, the top-level retries) were stored and failed later with 22P02
--     (check_runs failed on every pass after such a run timed out); `async` and `version` of the
--     wrong JSON type failed with 22P02 instead of AF010;
--   * two pipelines naming one type put at once: the second failed with 42710 (wf_watch_type).

-- Whether a new type's name would take the name of another type's table, sequence or index, or
-- another type would take its names: tasks_<type>_<shard>, tasks_<type>_id_seq,
-- tasks_<type>_pkey, tasks_<type>_ready and tasks_<type>_running belong to <type>.
create function asyncflow.check_new_type_name(p_task_type text) returns void
language plpgsql stable as $$
declare
  -- the ends of the names a type's objects add to tasks_<type>
  v_owned constant text := '_([0-9]+|id_seq|pkey|ready|running)$';
  v_other text;
begin
  perform asyncflow.check_type_name(p_task_type);
  if p_task_type ~ v_owned then
    perform asyncflow.raise_error('AF003', format(
      'invalid task type name %L: a name may not end in _<digits>, _id_seq, _pkey, _ready or _running '
      '(the names of a type''s shards, sequence and indexes)', p_task_type));
  end if;
  select y.task_type into v_other from asyncflow.task_types y
  where y.task_type ~ ('^' || p_task_type || v_owned) limit 1;
  if found then
    perform asyncflow.raise_error('AF003', format(
      'invalid task type name %L: its shards and indexes would take the names of type %L', p_task_type, v_other));
  end if;
end
$$;
revoke all on function asyncflow.check_new_type_name(text) from public;

-- register_task_type (V20 on V4): a new type's name checked for collisions, integer settings
-- cast through numeric (1.0 is 1: check_settings has refused fractions already).
create or replace function asyncflow.register_task_type(task_type text, settings jsonb default '{}')
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
#variable_conflict use_column
declare
  p_task_type alias for $1;
  p_settings jsonb := coalesce($2, '{}');
  v_type asyncflow.task_types;
  v_now timestamptz := now();
begin
  perform asyncflow.check_type_name(p_task_type);
  perform asyncflow.check_settings(p_settings);
  perform 1 from asyncflow.task_types where task_type = p_task_type for update;
  if not found then
    perform pg_advisory_xact_lock(16711, hashtext(p_task_type));
    perform 1 from asyncflow.task_types where task_type = p_task_type for update;
  end if;
  if not found then
    perform asyncflow.check_new_type_name(p_task_type);
    -- DDL waits at most this long for a lock; the caller gets an error and can try again.
    perform set_config('lock_timeout', '5s', true);
    execute format('create sequence asyncflow.%I', 'tasks_' || p_task_type || '_id_seq');
    insert into asyncflow.task_types (task_type, id_seq, created_at, updated_at)
    values (p_task_type, ('asyncflow.' || quote_ident('tasks_' || p_task_type || '_id_seq'))::regclass, v_now, v_now);
    execute format('create table asyncflow.%I (like asyncflow.tasks including defaults) partition by list (shard)',
      'tasks_' || p_task_type);
    execute format('alter table asyncflow.%I add constraint %I primary key (id, shard)',
      'tasks_' || p_task_type, 'tasks_' || p_task_type || '_pkey');
    execute format('create index %I on asyncflow.%I (order_time) where status = ''pending''',
      'tasks_' || p_task_type || '_ready', 'tasks_' || p_task_type);
    execute format('create index %I on asyncflow.%I (lease_until) where status = ''running''',
      'tasks_' || p_task_type || '_running', 'tasks_' || p_task_type);
    execute format('alter table asyncflow.tasks attach partition asyncflow.%I for values in (%L)',
      'tasks_' || p_task_type, p_task_type);
    perform asyncflow.create_shard(p_task_type, 1, v_now);
    insert into asyncflow.positions (task_type, updated_at) values (p_task_type, v_now);
  end if;
  update asyncflow.task_types set
    schedule_limit = coalesce((p_settings ->> 'schedule_limit')::numeric::integer, schedule_limit),
    schedule_interval = coalesce((p_settings ->> 'schedule_interval')::double precision, schedule_interval),
    max_processing_time = coalesce((p_settings ->> 'max_processing_time')::numeric::integer, max_processing_time),
    max_retry_num = coalesce((p_settings ->> 'max_retry_num')::numeric::integer, max_retry_num),
    max_retry_interval = coalesce((p_settings ->> 'max_retry_interval')::numeric::integer, max_retry_interval),
    shard_max_rows = coalesce((p_settings ->> 'shard_max_rows')::numeric::bigint, shard_max_rows),
    retention = coalesce((p_settings ->> 'retention')::numeric::integer, retention),
    concurrency = case when p_settings ? 'concurrency' then (p_settings ->> 'concurrency')::numeric::integer else concurrency end,
    paused = coalesce((p_settings ->> 'paused')::boolean, paused),
    initial_stage = coalesce(p_settings ->> 'initial_stage', initial_stage),
    updated_at = v_now
  where task_type = p_task_type
  returning * into v_type;
  return asyncflow.task_type_json(v_type);
end
$$;

-- create_tasks (V4): every element an object, checked in strict mode (insert_tasks' one-scan
-- check runs in lax mode, where a filter unwraps an array element into its members).
create or replace function asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamptz default null)
returns setof text
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_n bigint;
begin
  if jsonb_typeof(tasks) = 'array' and jsonb_path_exists(tasks, 'strict $[*] ? (@.type() != "object")') then
    select x.n into v_n from jsonb_array_elements(tasks) with ordinality x(e, n)
    where jsonb_typeof(x.e) <> 'object' order by x.n limit 1;
    perform asyncflow.raise_error('AF006', format('tasks[%s]: must be a JSON object', v_n - 1));
  end if;
  return query select unnest(asyncflow.insert_tasks(task_type, tasks, p_now, false));
end
$$;

-- report_task_arrays (V19): the answers of reports of no known type are named columns, also
-- when no type's function is called.
create or replace function asyncflow.report_task_arrays(
  p_owner text,
  p_task_ids text[],
  p_claim_seqs integer[],
  p_outcomes text[],
  p_stages text[] default null,
  p_contexts jsonb[] default null,
  p_results jsonb[] default null,
  p_errors text[] default null,
  p_retries boolean[] default null,
  p_delays double precision[] default null,
  p_now timestamptz default null
)
returns table (task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamptz)
language plpgsql security definer set search_path = pg_catalog, pg_temp
-- one primary-key probe per report, never a scan (see claim_tasks); the type's report function
-- sets the same for its own statement
set enable_seqscan = off set jit = off set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
  v_now timestamptz := coalesce(p_now, now());
  v_names text[];
  v_types text[];
begin
  -- The batch's known types. Each has its report function (its statement kept with its plan),
  -- which checks the batch, applies that type's reports and wakes the type; the reports of a type
  -- that does not exist are refused (no such task).
  v_names := array(select distinct split_part(u.task_id, '-', 1) from unnest(p_task_ids) u(task_id));
  v_types := array(select y.task_type from asyncflow.task_types y where y.task_type = any (v_names));
  if cardinality(v_names) = 1 and cardinality(v_types) = 1 then
    -- the usual batch: one type; the function's rows come in report order
    return query execute format('select task_id, accepted, status, lease_until from asyncflow.%I('
      '$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)', 'type_report__' || v_types[1])
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now;
  else
    -- checked here too: a batch with no known type calls no type function
    perform asyncflow.check_report_arrays(p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results,
      p_errors, p_retries, p_delays);
    return query execute 'select task_id, accepted, status, lease_until from ('
      || (select coalesce(string_agg(format('select * from asyncflow.%I($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) '
            'union all ', 'type_report__' || t), ''), '') from unnest(v_types) t)
      || 'select u.n, u.task_id, false as accepted, null::asyncflow.task_status as status, null::timestamptz as lease_until '
      || 'from unnest($2) with ordinality u(task_id, n) where split_part(u.task_id, ''-'', 1) <> all ($12)) x order by n'
      using p_owner, p_task_ids, p_claim_seqs, p_outcomes, p_stages, p_contexts, p_results, p_errors, p_retries,
        p_delays, v_now, v_types;
  end if;
end
$$;

-- The day of a run id, null when the id does not hold a real date (to_date raised 22008).
-- Nested CASEs: each cast runs only on what the test before it allowed.
create or replace function asyncflow.run_day(p_id text) returns date
language sql immutable parallel safe as $$
  select case when p_id ~ '^r[0-9]{8}-[0-9a-f]{32}' then
    case when substr(p_id, 2, 4)::integer >= 1 and substr(p_id, 6, 2)::integer between 1 and 12 then
      case when substr(p_id, 8, 2)::integer between 1 and extract(day from make_date(substr(p_id, 2, 4)::integer,
          substr(p_id, 6, 2)::integer, 1) + interval '1 month' - interval '1 day')::integer
        then make_date(substr(p_id, 2, 4)::integer, substr(p_id, 6, 2)::integer, substr(p_id, 8, 2)::integer)
      end
    end
  end
$$;

-- compile_pipeline (V11) behind the checks its casts need: the integer fields are integers, and
-- async and version of their JSON types, before V11's checks and casts run.
alter function asyncflow.compile_pipeline(text, jsonb) rename to compile_pipeline_v11;
create function asyncflow.compile_pipeline(p_name text, p_definition jsonb) returns jsonb
language plpgsql as $$
declare
  v_node jsonb;
  v_key text;
begin
  if jsonb_typeof(p_definition -> 'retries') = 'number' and not asyncflow.is_integral(p_definition -> 'retries') then
    perform asyncflow.pipeline_error(format('retries must be an integer between 0 and 100, got %s', p_definition -> 'retries'));
  end if;
  if jsonb_typeof(p_definition -> 'nodes') = 'array' then
    for v_node in select e from jsonb_array_elements(p_definition -> 'nodes') e where jsonb_typeof(e) = 'object' loop
      foreach v_key in array array['priority', 'timeout_retries', 'max_segments', 'version'] loop
        if (v_key = 'version' and jsonb_typeof(v_node -> v_key) not in ('number', 'null'))
          or (jsonb_typeof(v_node -> v_key) = 'number' and not asyncflow.is_integral(v_node -> v_key)) then
          perform asyncflow.pipeline_error(format('node %L: %s must be an integer, got %s',
            v_node ->> 'name', v_key, v_node -> v_key));
        end if;
      end loop;
      if jsonb_typeof(v_node -> 'async') not in ('boolean', 'null') then
        perform asyncflow.pipeline_error(format('node %L: async must be true or false', v_node ->> 'name'));
      end if;
    end loop;
  end if;
  return asyncflow.compile_pipeline_v11(p_name, p_definition);
end
$$;
revoke all on function asyncflow.compile_pipeline(text, jsonb) from public;

-- Whether a JSON number has no fraction.
create function asyncflow.is_integral(p_value jsonb) returns boolean
language sql immutable parallel safe as $$
  select (p_value #>> '{}')::numeric = trunc((p_value #>> '{}')::numeric)
$$;
revoke all on function asyncflow.is_integral(jsonb) from public;

-- The generators of the per-type functions are the schema owner's (they run DDL): no EXECUTE
-- for PUBLIC either (a client could not have used it, lacking CREATE on the schema).
revoke all on function asyncflow.create_claim_function(text), asyncflow.create_report_function(text),
  asyncflow.tg_task_types__functions() from public;

-- wf_watch_type (V11) under a per-type advisory lock, (16715, hashtext(type)): two pipelines
-- naming the same type, put concurrently, both found no trigger and the second failed to create
-- it (42710). The second now waits for the first and finds its trigger.
create or replace function asyncflow.wf_watch_type(p_task_type text) returns void
language plpgsql as $$
begin
  perform asyncflow.check_type_name(p_task_type);
  perform pg_advisory_xact_lock(16715, hashtext(p_task_type));
  if not exists (select 1 from pg_trigger g where g.tgname = 'tg_tasks__workflow' and not g.tgisinternal
      and g.tgrelid = format('asyncflow.%I', 'tasks_' || p_task_type)::regclass) then
    execute format('create trigger tg_tasks__workflow after update on asyncflow.%I for each row '
      'when (new.run_ref is not null and old.status is distinct from new.status) '
      'execute function asyncflow.tg_tasks__workflow()', 'tasks_' || p_task_type);
  end if;
end
$$;
