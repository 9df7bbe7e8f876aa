-- V37: hardening.
--
-- 1. Error messages no longer repeat a long input in full. Messages are written with
--    format(... %L / %s ...) around the caller's values (a type, stage, setting or node name, a
--    task or run id), so a 1 MB name came back as a 1 MB error, to the caller, the server log and
--    the HTTP client. Every message the SQL API raises goes through raise_error, pipeline_error or
--    wf_run_error (and set_pipeline_status's one direct raise), so those cut it, by one rule:
--    shorten() keeps a message of up to 400 characters whole, else its first 200 and last 150
--    characters (a value is usually followed by the explanation) around "…[N characters cut]…".
--    The Rust side applies the same rule (crate::error::shorten) to the messages it relays.
--
-- 2. record_callback takes p_give_up: an attempt whose error will be the same at every attempt
--    (a target that --callback-allow refuses) fails the callback at once, recorded with why,
--    instead of being retried until give_up_at (a day). A callback node fails with it. The
--    parameter comes before the trailing p_now, so the old function is dropped, not overloaded.
--
-- 3. drop_expired_runs takes the run tables before the day's partitions. Dropping a partition
--    needs ACCESS EXCLUSIVE on it and on its table. V12 locked the day's five partitions first
--    and met the tables' locks only at DROP TABLE, the reverse of every statement on run records
--    (the table, then its partitions): a statement holding `runs` or `callbacks` that reached for
--    the day's partition (check_runs, list_runs and claim_callbacks scan every day) deadlocked
--    with it, and having waited first it was the one PostgreSQL cancelled (the fault V30 fixed
--    in drop_expired_shards). The tables now come first, then the partitions. And since the
--    workflow functions do not take the five tables in one order (record_callback: callbacks,
--    then run_events and runs; the tasks trigger: run_traces, then run_events; start_run,
--    check_runs, complete_node: runs, then run_events ...), no order of the drop's can agree
--    with all of them: the drop waits up to 1 s for its first table, holding no lock stronger
--    than the ACCESS SHARE its first query (which days may go) left on runs and callbacks, and at
--    most 100 ms for each lock after it, else gives the day up for this pass and releases
--    everything.
--    It so never holds a table for long while waiting for another, well below the 1 s after which
--    a writer it blocks would run the deadlock check. A deadlock error of its own is taken as
--    busy too.

-- A message cut to at most 400 characters (plus the marker), see above.
create function asyncflow.shorten(p_text text) returns text
language sql immutable parallel safe as $$
  select case when length(p_text) <= 400 then p_text
    else left(p_text, 200) || format('…[%s characters cut]…', length(p_text) - 350) || right(p_text, 150) end
$$;
revoke all on function asyncflow.shorten(text) from public;

CREATE OR REPLACE FUNCTION asyncflow.raise_error(p_code text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  -- (V37) cut: the message may repeat a caller's value of any size
  raise exception using errcode = p_code, message = asyncflow.shorten(p_message);
end
$$;

CREATE OR REPLACE FUNCTION asyncflow.pipeline_error(p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  -- (V37) cut: the message may repeat a name from the definition, of any size
  raise exception using errcode = 'AF010', message = asyncflow.shorten(p_message);
end
$$;

CREATE OR REPLACE FUNCTION asyncflow.wf_run_error(p_code text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS $$
begin
  -- (V37) cut: the message may repeat a caller's value of any size
  raise exception using errcode = p_code, message = asyncflow.shorten(p_message);
end
$$;

CREATE OR REPLACE FUNCTION asyncflow.set_pipeline_status(name text, version integer, status text) RETURNS asyncflow.pipelines
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  p_name alias for $1;
  p_version alias for $2;
  p_status alias for $3;
  v_row asyncflow.pipelines;
begin
  if p_status is null or p_status not in ('active', 'draft', 'retired') then
    perform asyncflow.raise_error('AF006', format('status must be active, draft or retired, got %s',
      coalesce(quote_literal(p_status), 'null')));
  end if;
  perform pg_advisory_xact_lock(16714, hashtext(p_name));
  if p_status = 'active' then
    update asyncflow.pipelines p set status = 'retired', updated_at = now()
    where p.name = p_name and p.status = 'active' and p.version <> p_version;
  end if;
  update asyncflow.pipelines p set status = p_status, updated_at = now()
  where p.name = p_name and p.version = p_version returning * into v_row;
  if not found then
    -- (V37) through raise_error, which cuts a long name
    perform asyncflow.raise_error('AF011', format('unknown pipeline %L version %s', p_name, p_version));
  end if;
  return v_row;
end
$_$;

drop function asyncflow.record_callback(text, integer, integer, text, integer, timestamptz);

-- record_callback: the outcome of one attempt (fenced by its attempt number). Delivered when
-- p_error is null; otherwise due again after min(2^(attempt-1), callback_max_interval) s, or
-- given up (failed) once past give_up_at, or at once when p_give_up (V37). A callback node
-- succeeds or fails with its delivery. Returns the callback's status, or null when the attempt
-- is stale.
CREATE FUNCTION asyncflow.record_callback(p_callback_id text, p_attempt integer, p_http_status integer, p_error text, p_cost_ms integer, p_give_up boolean DEFAULT false, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_cb asyncflow.callbacks;
begin
  update asyncflow.callbacks c set
    status = case when p_error is null then 'delivered' when p_give_up or v_now >= c.give_up_at then 'failed'
      else 'pending' end,
    delivered_at = case when p_error is null then v_now end,
    last_error = left(p_error, 500),
    next_attempt_at = case when p_error is null then c.next_attempt_at
      else v_now + make_interval(secs => least(power(2, least(c.attempts - 1, 30)),
        (select callback_max_interval from asyncflow.config))) end,
    owner = null,
    log = case when jsonb_array_length(c.log) >= 50 then c.log - 0 else c.log end || jsonb_build_array(jsonb_strip_nulls(
      jsonb_build_object('attempt', p_attempt, 'at', v_now, 'http_status', p_http_status, 'error', left(p_error, 500),
        'cost_ms', p_cost_ms, 'given_up', case when p_error is not null and p_give_up then true end))),
    updated_at = v_now
  where c.day = asyncflow.run_day(p_callback_id) and c.callback_id = p_callback_id and c.status = 'pending'
    and c.attempts = p_attempt
  returning * into v_cb;
  if not found then
    return null;
  end if;
  if v_cb.kind = 'node' and v_cb.status = 'delivered' then
    perform asyncflow.wf_complete_event(v_cb.event_id, jsonb_build_object('delivered_at', v_now, 'url', v_cb.url,
      'http_status', p_http_status, 'attempts', v_cb.attempts), v_now);
  elsif v_cb.kind = 'node' and v_cb.status = 'failed' then
    perform asyncflow.wf_fail_event(v_cb.event_id, case when p_give_up
      then format('callback to %s not delivered: %s', v_cb.url, p_error)
      else format('callback to %s not delivered after %s attempts: %s', v_cb.url, v_cb.attempts, p_error) end, v_now);
  end if;
  return v_cb.status;
end
$$;
revoke all on function asyncflow.record_callback(text, integer, integer, text, integer, boolean, timestamptz) from public;

-- drop_expired_runs: drops, whole, the days of run records older than config.run_retention
-- whose runs have all ended and whose callbacks are settled: no DELETE, no dead tuples. A day
-- with a run still open stays until it ends, and is not locked (V37). Locks (V37): the five
-- tables first (runs waited for up to 1 s, each next one up to 100 ms), then the day's
-- partitions; a busy day waits for the next pass. Returns the dropped days.
CREATE OR REPLACE FUNCTION asyncflow.drop_expired_runs(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF date
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_day date;
  v_days date[];
  v_table text;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  -- (V37) a day that cannot go is not locked at all (checked again under the locks below); the
  -- days are read whole first, since a query still open on a partition keeps it from being dropped
  select coalesce(array_agg(d.day order by d.day), '{}') into v_days
  from asyncflow.run_days d, asyncflow.config c
  where d.dropped_at is null and d.day + 1 <= ((v_now - make_interval(secs => c.run_retention)) at time zone 'UTC')::date
    and not exists (select 1 from asyncflow.runs r where r.day = d.day and r.status in ('scheduled', 'running'))
    and not exists (select 1 from asyncflow.callbacks k where k.day = d.day and k.status = 'pending');
  foreach v_day in array v_days loop
    begin
      -- (V37) the tables, then the day's partitions: the order every statement on run records
      -- takes. DROP TABLE of a partition locks its table too; taking the partitions first, as
      -- V12 did, deadlocked with a statement holding the table and reaching for the partition.
      -- Only the first table is waited for long (nothing is held yet); after it each lock is
      -- waited for briefly, since the workflow functions take the tables in no single order
      -- and one of them may hold the next table while waiting for one taken here. (Once a day
      -- is dropped, the tables stay locked and these are no-ops for the next days.)
      perform set_config('lock_timeout', '1s', true);
      lock table only asyncflow.runs in access exclusive mode;
      perform set_config('lock_timeout', '100ms', true);
      lock table only asyncflow.run_events, asyncflow.run_segments, asyncflow.run_traces, asyncflow.callbacks
        in access exclusive mode;
      foreach v_table in array array['runs', 'run_events', 'run_segments', 'run_traces', 'callbacks'] loop
        execute format('lock table asyncflow.%I in access exclusive mode', v_table || '_' || to_char(v_day, 'YYYYMMDD'));
      end loop;
      if exists (select 1 from asyncflow.runs r where r.day = v_day and r.status in ('scheduled', 'running'))
        or exists (select 1 from asyncflow.callbacks c where c.day = v_day and c.status = 'pending') then
        perform set_config('lock_timeout', v_lock_timeout, true);
        continue;
      end if;
      foreach v_table in array array['callbacks', 'run_traces', 'run_segments', 'run_events', 'runs'] loop
        execute format('drop table asyncflow.%I', v_table || '_' || to_char(v_day, 'YYYYMMDD'));
      end loop;
      perform set_config('lock_timeout', v_lock_timeout, true);
    exception when lock_not_available or deadlock_detected then
      -- busy: tried again at the next pass (everything this day took is released)
      perform set_config('lock_timeout', v_lock_timeout, true);
      continue;
    end;
    update asyncflow.run_days set dropped_at = v_now where day = v_day;
    return next v_day;
  end loop;
end
$$;
