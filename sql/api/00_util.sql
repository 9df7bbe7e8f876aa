-- Small helpers every other file uses: errors, ids, time and JSON checks, backoff, wake-ups.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

create or replace function asyncflow.raise_error(p_code text, p_message text) returns void
    language plpgsql
    as $$
begin
  -- cut (shorten): the message may repeat a caller's value of any size
  raise exception using errcode = p_code, message = asyncflow.shorten(p_message);
end
$$;

-- The one pattern for task type names: they become partition names (tasks_<type>_<shard>).
create or replace function asyncflow.check_type_name(p_task_type text) returns void
language plpgsql immutable as $$
begin
  if p_task_type is null or p_task_type !~ '^[a-z][a-z0-9_]{0,39}$' then
    perform asyncflow.raise_error('AF003', format(
      'invalid task type name %s: it must match ^[a-z][a-z0-9_]{0,39}$', coalesce(quote_literal(p_task_type), 'null')));
  end if;
end
$$;

-- Retry back-off in seconds after the p_attempt-th failed try (1-based) of a stage:
--   p_max > 0  progressive  min(2^(attempt-1), p_max)   1, 2, 4, 8, 10, 10 ... for p_max = 10
--   p_max < 0  uniform      |p_max| every time
--   p_max = 0  no wait
create or replace function asyncflow.retry_backoff(p_attempt integer, p_max integer) returns interval
language sql immutable parallel safe as $$
  select make_interval(secs => case
    when p_max > 0 then least(power(2::double precision, least(greatest(p_attempt, 1) - 1, 40)), p_max::double precision)
    when p_max < 0 then abs(p_max)::double precision
    else 0 end)
$$;

-- The wait before a failed task is tried again: its back-off (retry_backoff) less up to a tenth at
-- random, so that many tasks failing together (a dependency down) do not come back in lock-step,
-- and no wait is longer than the back-off the settings give.
create or replace function asyncflow.retry_wait(p_attempt integer, p_max integer) returns interval
language sql volatile parallel safe as $$
  select asyncflow.retry_backoff(p_attempt, p_max) * (0.9 + 0.1 * random())
$$;

-- '<type>-<shard>-<id>' -> parts; null when the text is not a task id.
create or replace function asyncflow.parse_task_id(p_task_id text, out task_type text, out shard integer, out id bigint)
language sql immutable parallel safe as $$
  select split_part(p_task_id, '-', 1), split_part(p_task_id, '-', 2)::integer, split_part(p_task_id, '-', 3)::bigint
  where p_task_id ~ '^[a-z][a-z0-9_]{0,39}-[1-9][0-9]{0,8}-[1-9][0-9]{0,17}$'
$$;

-- Explicit casts: `text || integer` resolves to the stable anytextcat, which keeps the planner
-- from inlining this immutable function (a full function call per id, about 15 times slower).
create or replace function asyncflow.format_task_id(p_task_type text, p_shard integer, p_id bigint) returns text
language sql immutable parallel safe as $$
  select p_task_type || '-' || p_shard::text || '-' || p_id::text
$$;

-- Whether p_stage is a stage name (1 to 64 of A-Za-z0-9_.:/-; false for null), for the hot
-- paths (reports, a hold's finish): an unbounded pattern plus a length, several times cheaper
-- per row than the bounded repetition {1,64}. A plain expression of immutable parts, so the
-- planner inlines it.
create or replace function asyncflow.stage_ok(p_stage text) returns boolean
language sql immutable parallel safe as $$
  select coalesce(p_stage ~ '^[A-Za-z0-9_.:/-]+$' and length(p_stage) <= 64, false)
$$;

-- Appends one entry (an object) to a schedule log, keeping the last 20. A plain expression
-- (inlined by the planner): the hot report path calls it once per task.
create or replace function asyncflow.append_log(p_log jsonb, p_entry jsonb) returns jsonb
language sql stable parallel safe as $$
  -- each argument appears once (p_log is a column, cheap to repeat): otherwise the planner
  -- refuses to inline a call whose argument is an expression. An array || an object appends the
  -- object as one element, with no array built around it first.
  select case when jsonb_array_length(p_log) < 20 then p_log
    else jsonb_path_query_array(p_log, '$[last - 18 to last]') end || p_entry
$$;

-- Appends entries (an array of objects) to a schedule log, keeping the last 20: a finish's
-- chained stages (sql/api/templates/finish.sql).
create or replace function asyncflow.append_logs(p_log jsonb, p_entries jsonb) returns jsonb
language sql immutable parallel safe as $$
  select case when jsonb_array_length(p_log) + jsonb_array_length(p_entries) <= 20 then p_log || p_entries
    else jsonb_path_query_array(p_log || p_entries, '$[last - 19 to last]') end
$$;

-- Wakes workers of a type: NOTIFY asyncflow, <type> at commit. PostgreSQL serialises the commits
-- of notifying transactions behind one database-wide lock held through the commit's flush, so a
-- NOTIFY in every enqueue would cap enqueue throughput at one flush at a time. Only the
-- transaction that wins a per-type transaction-scoped try-lock notifies; concurrent ones skip,
-- and their tasks are found by the workers' re-check right after each wake-up (or by the poll).
-- PL/pgSQL, not SQL: a SQL function with a WHERE clause cannot be inlined, and one not inlined is
-- parsed and planned again at every call (in create_task, one per enqueue, about a tenth of the
-- server's time: create_task one per transaction from 8 connections runs about 5,000/s that way,
-- 6,400/s with this body on the machine measured). A PL/pgSQL body keeps its plan for the session.
create or replace function asyncflow.wake(p_task_type text) returns void
language plpgsql as $$
begin
  if pg_try_advisory_xact_lock(16712, hashtext(p_task_type)) then
    perform pg_notify('asyncflow', p_task_type);
  end if;
end
$$;

-- run_at is refused (AF006) outside 0002-01-01 .. 9999-01-01 (UTC), in create_task and in
-- create_tasks (through is_timestamptz).
--
-- PostgreSQL writes times before year 1 or after 9999 in JSON as "0100-01-01T00:00:00+00:00 BC"
-- or "10000-01-01T...", which no RFC 3339 reader takes: such a task could be created, and then
-- get_task's readers (the HTTP API, the Rust client, a worker's held-task list) would fail on it,
-- and on every page of its type's task list. A year of margin at each end keeps run_at less the
-- priority (at most 360 days) and the times in any session time zone within years 1 to 9999.
create or replace function asyncflow.is_timestamptz(p_text text) returns boolean
language plpgsql stable as $$
begin
  return p_text::timestamptz between '0002-01-01 00:00:00+00' and '9999-01-01 00:00:00+00';
exception when others then
  return false;
end
$$;

-- The clock a caller passes (p_now) is checked as run_at is: every public function that takes
-- a p_now calls check_now, which returns the time the call runs at (now() when p_now is null)
-- or raises AF006 'p_now: ...' for infinity and for times outside 0002-01-01 .. 9998-01-01 (UTC).
-- The top is a year below run_at's: asyncflow sets times up to a year and a day after now (a
-- lease, a later's delay, a back-off, a run's deadline, a start_run's run_at), and those must
-- stay readable too (see is_timestamptz). now_ok is the test alone, written for create_task's
-- direct path (under the caller's search_path: every name qualified, so the planner inlines it
-- without anything of the caller's).
create or replace function asyncflow.now_ok(p_now timestamptz) returns boolean
language sql immutable parallel safe as $$
  select p_now is null
    or (p_now operator(pg_catalog.>=) '0002-01-01 00:00:00+00'::pg_catalog.timestamptz
      and p_now operator(pg_catalog.<=) '9998-01-01 00:00:00+00'::pg_catalog.timestamptz)
$$;

-- A task's traceparent (the W3C trace context of its enqueue): version 00, a 32-digit trace id
-- and a 16-digit parent id in lowercase hex, neither all zeros, and 2 hex digits of flags.
-- traceparent_ok is the test alone (null passes), for create_task's direct path like now_ok.
create or replace function asyncflow.traceparent_ok(p_traceparent text) returns boolean
language sql immutable parallel safe as $$
  select p_traceparent is null
    or p_traceparent operator(pg_catalog.~)
      '^00-(?!0{32}-)[0-9a-f]{32}-(?!0{16}-)[0-9a-f]{16}-[0-9a-f]{2}$'::pg_catalog.text
$$;

create or replace function asyncflow.check_now(p_now timestamptz) returns timestamptz
language plpgsql stable as $$
begin
  if not asyncflow.now_ok(p_now) then
    perform asyncflow.raise_error('AF006', format(
      'p_now: the clock must be a timestamp from 0002-01-01 to 9998-01-01 (UTC), got %s', p_now));
  end if;
  return coalesce(p_now, now());
end
$$;

-- The rule for the JSON a task holds (a context, a result; a run's input, a node's result):
-- every reader of asyncflow's data must be able to parse it, and serde_json (the server, the
-- worker, the client) parses numbers into f64 and at most 127 levels of nesting. So, checked
-- where JSON comes in (create_task, create_tasks, reports, finishes of held claims, start_run,
-- complete_node), and refused with AF006 '<field>: ...':
-- - a number whose absolute value is above 1e308. PostgreSQL keeps any number exactly (1e400;
--   1.7976931348623157e308, f64's largest, as a 309-digit integer that f64 then overflows on
--   reading it back); every number up to 1e308 reads back as a finite f64, and that f64 writes
--   back within the range (the f64 nearest 1e308 writes as 1e+308), so a worker that hands on
--   what it read is not refused;
-- - nesting deeper than 64 levels of arrays and objects ({} is 1 level, {"a": [1]} 2): what
--   asyncflow wraps around a value (a task's fields, a page of tasks, a run's records, a workflow
--   node's context) stays far below 127.
-- Both are jsonpath scans (C): the depth one stops at level 64, the number one visits every
-- value (.abs() of anything but a number is an error, which a filter takes as false).
-- json_ok is the test alone (null passes), written for create_task's direct path like now_ok;
-- json_problem says what is wrong (null when nothing is); check_json raises. The values most
-- tasks carry, an empty object (a context) and JSON null (a result), pass by comparison first:
-- the two scans cost about a microsecond per value, a claim and a finish a value per task each.
create or replace function asyncflow.json_ok(p_value jsonb) returns boolean
language sql immutable parallel safe as $$
  select p_value is null or p_value operator(pg_catalog.=) '{}'::pg_catalog.jsonb
    or p_value operator(pg_catalog.=) 'null'::pg_catalog.jsonb or not (
    pg_catalog.jsonb_path_exists(p_value,
      'strict $.**{64} ? (@.type() == "object" || @.type() == "array")'::pg_catalog.jsonpath)
    or pg_catalog.jsonb_path_exists(p_value, 'strict $.** ? (@.abs() > 1e308)'::pg_catalog.jsonpath))
$$;

create or replace function asyncflow.json_problem(p_value jsonb) returns text
language sql immutable parallel safe as $$
  select case
    when asyncflow.json_ok(p_value) then null
    when jsonb_path_exists(p_value, 'strict $.**{64} ? (@.type() == "object" || @.type() == "array")')
      then 'nests deeper than 64 levels of arrays and objects (the limit of asyncflow''s JSON)'
    else format('holds the number %s: numbers must lie between -1e308 and 1e308 (the limit of asyncflow''s JSON)',
      (select case when length(n) <= 40 then n else format('%s… (%s characters)', left(n, 20), length(n)) end
       from (select jsonb_path_query_first(p_value, 'strict $.** ? (@.abs() > 1e308)')::text as n) x))
  end
$$;

create or replace function asyncflow.check_json(p_value jsonb, p_field text) returns void
language plpgsql immutable as $$
begin
  if not asyncflow.json_ok(p_value) then
    perform asyncflow.raise_error('AF006', format('%s: %s', p_field, asyncflow.json_problem(p_value)));
  end if;
end
$$;

-- The way out: the rule is checked where JSON comes in, but a row written past the API (by hand,
-- a restore, an older build) may still break it, and a reader that cannot parse one row must not
-- fail a claim or a page. So every function that hands JSON out passes the free-form values
-- through these two, the one place that decides what such a row becomes:
-- - unreadable(field, value): null when the value keeps the rule, else '<field> cannot be read:
--   <what json_problem says>'. A claim fails a task whose context is unreadable, with this as
--   its error (no worker could decode it, and a retry would read the same bytes), and hands out
--   the rest of its batch.
-- - json_out(doc, fields): the object doc (a task, a run, a run's event, segment, trace or
--   callback) with each named field that is unreadable replaced (an array by [], anything else
--   by null), plus "decode_error" (each field's error, '; ' between) and "raw" ({field: the
--   value as text}); doc itself when nothing is. A readable doc costs one json_ok scan pair.
-- Concatenation, not format(): format is stable, and an immutable SQL function whose body calls
-- a stable one is not inlined: run as a function per row, it cost a claim about 3 µs per task
-- (four times the check itself).
create or replace function asyncflow.unreadable(p_field text, p_value jsonb) returns text
language sql immutable parallel safe as $$
  select case when not asyncflow.json_ok(p_value)
    then p_field || ' cannot be read: it ' || asyncflow.json_problem(p_value) end
$$;

create or replace function asyncflow.json_out(p_doc jsonb, p_fields text[]) returns jsonb
language plpgsql immutable parallel safe as $$
declare
  v_field text;
  v_error text;
  v_errors text[];
  v_raw jsonb := '{}';
begin
  -- the doc is one level deeper than its fields: a field at 64 levels fails this and passes below
  if asyncflow.json_ok(p_doc) then
    return p_doc;
  end if;
  foreach v_field in array p_fields loop
    v_error := asyncflow.unreadable(v_field, p_doc -> v_field);
    if v_error is not null then
      v_errors := v_errors || v_error;
      v_raw := v_raw || jsonb_build_object(v_field, (p_doc -> v_field)::text);
      p_doc := jsonb_set(p_doc, array[v_field],
        case jsonb_typeof(p_doc -> v_field) when 'array' then '[]'::jsonb else 'null'::jsonb end);
    end if;
  end loop;
  if v_errors is null then
    return p_doc;
  end if;
  return p_doc || jsonb_build_object('decode_error', array_to_string(v_errors, '; '), 'raw', v_raw);
end
$$;

-- The fencing token of a claim, from the task's last one: the greater of that + 1 and the
-- clock (now(), the transaction's start, never a caller's p_now) in microseconds since 1970.
-- Claims commit asynchronously, so a crash can lose a claim and the token it gave; the next
-- claim of the task, by the same worker id too, then comes later by the clock and gets a token
-- the lost claim never had, and a report from the lost claim is refused. Tokens stay strictly
-- increasing per task whatever the clock does; uniqueness across a crash assumes the server's
-- clock does not step back by more than the restart took. The microseconds stay below 2^53 until
-- the year 2255, so the token is exact in JSON readers that parse numbers as doubles.
create or replace function asyncflow.next_claim_seq(p_claim_seq bigint) returns bigint
language sql stable parallel safe as $$
  select greatest(p_claim_seq + 1, (pg_catalog.date_part('epoch', pg_catalog.now()) * 1000000)::bigint)
$$;

-- Called by every transaction that writes a completion (a success or an advance, or a "later"
-- with the context its next call starts from: a report, a hold's finish), so that the next
-- stage's call starts only from a completion that is durable.
-- With synchronous_commit off (a server, database or role setting some operators choose for
-- speed), such a commit is visible to the next stage's claim before its WAL is on disk, and a
-- crash would forget a completion whose next stage had already started; with local, a failover
-- to a synchronous standby would. So the rest of this transaction commits with on; the stronger
-- settings (remote_write, on, remote_apply) are kept. Claims stay asynchronous: a claim lost in
-- a crash only repeats a call with the same input. See docs/architecture.md, Guarantees.
create or replace function asyncflow.commit_durably() returns void
language plpgsql as $$
begin
  if pg_catalog.current_setting('synchronous_commit') in ('off', 'local') then
    perform pg_catalog.set_config('synchronous_commit', 'on', true);
  end if;
end
$$;

-- Raises AF007 unless the task exists.
create or replace function asyncflow.check_task_exists(p_task_type text, p_shard integer, p_id bigint, p_task_id text) returns void
language plpgsql stable as $$
begin
  perform 1 from asyncflow.tasks where task_type = p_task_type and shard = p_shard and id = p_id;
  if not found then
    perform asyncflow.raise_error('AF007', format('unknown task %L', p_task_id));
  end if;
end
$$;

create or replace function asyncflow.stage_time_bounds() returns double precision[]
language sql immutable parallel safe as $$
  select '{0.005,0.01,0.05,0.1,0.5,1,5,30,60,300,1800,3600,21600}'::double precision[]
$$;

-- True when the text is a valid jsonpath.
create or replace function asyncflow.is_jsonpath(p_text text) returns boolean
language plpgsql immutable as $$
begin
  perform p_text::jsonpath;
  return true;
exception when others then
  return false;
end
$$;

-- Whether a new type's name would take the name of another type's table, sequence or index, or
-- another type would take its names: tasks_<type>_<shard>, tasks_<type>_id_seq,
-- tasks_<type>_pkey, tasks_<type>_ready and tasks_<type>_running belong to <type>.
create or replace function asyncflow.check_new_type_name(p_task_type text) returns void
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

-- Whether a JSON number has no fraction.
create or replace function asyncflow.is_integral(p_value jsonb) returns boolean
language sql immutable parallel safe as $$
  select (p_value #>> '{}')::numeric = trunc((p_value #>> '{}')::numeric)
$$;

-- A message cut to at most 400 characters (plus the marker): kept whole up to 400, else its
-- first 200 and last 150 characters (a value is usually followed by the explanation) around
-- "…[N characters cut]…". raise_error, pipeline_error and wf_run_error cut every message with it,
-- as a message may repeat a caller's value of any size; the Rust side applies the same rule
-- (crate::error::shorten) to the messages it relays.
create or replace function asyncflow.shorten(p_text text) returns text
language sql immutable parallel safe as $$
  select case when length(p_text) <= 400 then p_text
    else left(p_text, 200) || format('…[%s characters cut]…', length(p_text) - 350) || right(p_text, 150) end
$$;
