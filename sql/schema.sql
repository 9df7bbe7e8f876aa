-- Snapshot of the schema that asyncflow migrate makes (generated; never executed).
-- Regenerate: UPDATE_SCHEMA=1 cargo test --test suite schema_snapshot::
-- Dumped by pg_dump from PostgreSQL 15.

CREATE SCHEMA asyncflow;

CREATE TYPE asyncflow.claimed_task AS (
	task_id text,
	task_type text,
	stage text,
	context jsonb,
	priority integer,
	attempt integer,
	claim_seq bigint,
	user_id text,
	lease_until timestamp with time zone,
	claimed_at timestamp with time zone,
	queue_key text,
	traceparent text,
	wake jsonb
);

CREATE TYPE asyncflow.held_task AS (
	task_id text,
	task_type text,
	stage text,
	context jsonb,
	priority integer,
	attempt integer,
	claim_seq bigint,
	user_id text,
	lease_until timestamp with time zone,
	claimed_at timestamp with time zone,
	queue_key text,
	traceparent text,
	wake jsonb,
	held boolean
);

CREATE TYPE asyncflow.run_status AS ENUM (
    'scheduled',
    'running',
    'succeeded',
    'failed',
    'timed_out',
    'cancelled'
);

CREATE TYPE asyncflow.task_status AS ENUM (
    'pending',
    'running',
    'waiting',
    'succeeded',
    'failed',
    'cancelled'
);

CREATE FUNCTION asyncflow.advance_begin_pos(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 44 lines, sha256 748f1a620cd22cb1

CREATE FUNCTION asyncflow.append_log(p_log jsonb, p_entry jsonb) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    AS -- body: 5 lines, sha256 062dc6035f51d4b6

CREATE FUNCTION asyncflow.append_logs(p_log jsonb, p_entries jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 2 lines, sha256 80729ee434f3b84e

CREATE FUNCTION asyncflow.bulk_change_tasks(p_action text, p_filter jsonb, p_dry_run boolean DEFAULT false, p_limit integer DEFAULT 1000, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(matched bigint, changed bigint, more boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 38 lines, sha256 374d95897e4dc039

CREATE FUNCTION asyncflow.can_maintain(OUT ok boolean, OUT denied text[]) RETURNS record
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 9 lines, sha256 0b38af81572995f6

CREATE FUNCTION asyncflow.cancel_children(p_task_type text, p_shard integer, p_id bigint, p_now timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 24 lines, sha256 dc55a5748c97f624

CREATE FUNCTION asyncflow.cancel_run(run_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 25 lines, sha256 e7776bfc3ec50af2

CREATE FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 48 lines, sha256 c3096442e50218d6

CREATE FUNCTION asyncflow.check_context(p_context jsonb) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 12 lines, sha256 9fd724034a3a3742

CREATE FUNCTION asyncflow.check_json(p_value jsonb, p_field text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS -- body: 5 lines, sha256 4968d8e151209da9

CREATE FUNCTION asyncflow.check_new_task(p_context jsonb, p_priority integer, p_run_at timestamp with time zone, p_stage text, p_user_id text, p_queue_key text, p_traceparent text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 25 lines, sha256 72bb5af4ee8cffb8

CREATE FUNCTION asyncflow.check_new_type_name(p_task_type text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS -- body: 18 lines, sha256 44148ec2a3ccf364

CREATE FUNCTION asyncflow.check_now(p_now timestamp with time zone) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE
    AS -- body: 7 lines, sha256 df582deed47e1321

CREATE FUNCTION asyncflow.check_report_arrays(p_task_ids text[], p_claim_seqs bigint[], p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[], p_delays double precision[], p_progress jsonb[]) RETURNS void
    LANGUAGE plpgsql STABLE
    AS -- body: 70 lines, sha256 dd31fb80dad5a2ba

CREATE FUNCTION asyncflow.check_runs(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 500) RETURNS TABLE(action text, id text, detail text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 136 lines, sha256 6ea4e53d19d4a873

CREATE FUNCTION asyncflow.check_settings(p_settings jsonb) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS -- body: 52 lines, sha256 a40f713a1f49b7ae

CREATE FUNCTION asyncflow.check_task_exists(p_task_type text, p_shard integer, p_id bigint, p_task_id text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS -- body: 6 lines, sha256 8054fb8470314658

CREATE FUNCTION asyncflow.check_type_name(p_task_type text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS -- body: 6 lines, sha256 430475baf1cdd71b

CREATE FUNCTION asyncflow.checkpoint_task(task_id text, claim_seq bigint, context jsonb) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 32 lines, sha256 c4eea1fa98813c58

CREATE FUNCTION asyncflow.child_result_max_bytes() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select 4096 $$;

CREATE FUNCTION asyncflow.children_results_max_bytes() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select 1048576 $$;

CREATE FUNCTION asyncflow.claim_callbacks(p_owner text, p_limit integer, p_lease integer DEFAULT 60, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(callback_id text, run_id text, kind text, url text, payload jsonb, attempt integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 18 lines, sha256 35479207f35bc2fd

CREATE FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF asyncflow.claimed_task
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 13 lines, sha256 fcdc9ad0e8163cc4

CREATE FUNCTION asyncflow.commit_durably() RETURNS void
    LANGUAGE plpgsql
    AS -- body: 5 lines, sha256 012f22f396ebecac

CREATE FUNCTION asyncflow.compile_pipeline(p_name text, p_definition jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS -- body: 385 lines, sha256 ae6d3e7ce068cf4f

CREATE FUNCTION asyncflow.complete_node(run_id text, node text, result jsonb DEFAULT NULL::jsonb, error text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 28 lines, sha256 98cae2cb4ad39109

CREATE FUNCTION asyncflow.count_by_status(p_task_type text) RETURNS TABLE(status text, n bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 1 lines, sha256 b97ef3fe5a6fb64d

CREATE FUNCTION asyncflow.count_child_ends(p_parent_ids text[]) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 3 lines, sha256 b9bbff61cb3a8402

CREATE FUNCTION asyncflow.create_shard(p_task_type text, p_shard integer, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 16 lines, sha256 9f86fc72b7da4a03

CREATE FUNCTION asyncflow.create_task(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, queue_key text DEFAULT NULL::text, unique_key text DEFAULT NULL::text, unique_for integer DEFAULT NULL::integer, traceparent text DEFAULT NULL::text, debounce_key text DEFAULT NULL::text, debounce_for interval DEFAULT NULL::interval) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    AS -- body: 68 lines, sha256 a9855efa991ed5ef

CREATE FUNCTION asyncflow.create_task_debounced(p_task_type text, p_context jsonb, p_priority integer, p_run_at timestamp with time zone, p_stage text, p_user_id text, p_now timestamp with time zone, p_queue_key text, p_traceparent text, p_debounce_key text, p_debounce_for interval) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 51 lines, sha256 d558aa49442ad879

CREATE FUNCTION asyncflow.create_task_general(task_type text, context jsonb DEFAULT '{}'::jsonb, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, stage text DEFAULT NULL::text, idempotency_key text DEFAULT NULL::text, user_id text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, queue_key text DEFAULT NULL::text, unique_key text DEFAULT NULL::text, unique_for integer DEFAULT NULL::integer, traceparent text DEFAULT NULL::text, debounce_key text DEFAULT NULL::text, debounce_for interval DEFAULT NULL::interval) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 74 lines, sha256 cd89b904f69b6b6b

CREATE FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 12 lines, sha256 72d85fb3e10ce275

CREATE FUNCTION asyncflow.create_type_functions(p_task_type text) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 52 lines, sha256 ae36e9b23965db68

CREATE FUNCTION asyncflow.current_leader(p_within_seconds double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(id text, host text, since timestamp with time zone, last_seen timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 2 lines, sha256 2e16e1b2320d42e0

CREATE FUNCTION asyncflow.drop_expired_events(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 10000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 14 lines, sha256 be3ad05ecc6c5f0a

CREATE FUNCTION asyncflow.drop_expired_runs(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF date
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 51 lines, sha256 4c014ec923ac3cf9

CREATE FUNCTION asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 50 lines, sha256 066b44e6d3b4b0f4

CREATE FUNCTION asyncflow.drop_expired_unique_keys(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 10000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 24 lines, sha256 79dea8353d17b29b

CREATE FUNCTION asyncflow.end_join(p_task_type text, p_shard integer, p_id bigint, p_now timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 35 lines, sha256 caa5ed9a72912714

CREATE FUNCTION asyncflow.end_waits(p_task_type text, p_shards integer[], p_ids bigint[], p_wakes jsonb[], p_now timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 13 lines, sha256 ad3e8e872c38972b

CREATE TABLE asyncflow.task_types (
    task_type text NOT NULL,
    schedule_limit integer DEFAULT 100 NOT NULL,
    schedule_interval double precision DEFAULT 5 NOT NULL,
    max_processing_time integer DEFAULT 300 NOT NULL,
    max_retry_num integer DEFAULT 3 NOT NULL,
    max_retry_interval integer DEFAULT 60 NOT NULL,
    shard_max_rows bigint DEFAULT 5000000 NOT NULL,
    retention integer DEFAULT 604800 NOT NULL,
    concurrency integer,
    paused boolean DEFAULT false NOT NULL,
    initial_stage text DEFAULT 'start'::text NOT NULL,
    id_seq regclass NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    fair_queues boolean DEFAULT false NOT NULL,
    queue_concurrency integer,
    rate_limited boolean DEFAULT false NOT NULL,
    queue_rate_limited boolean DEFAULT false NOT NULL,
    queue_max_starts integer,
    queue_rate_period double precision,
    speculative_chaining boolean DEFAULT false NOT NULL,
    CONSTRAINT task_types_concurrency_check CHECK (((concurrency >= 1) AND (concurrency <= 1000000))),
    CONSTRAINT task_types_initial_stage_check CHECK ((initial_stage ~ '^[A-Za-z0-9_.:/-]{1,64}$'::text)),
    CONSTRAINT task_types_max_processing_time_check CHECK (((max_processing_time >= 1) AND (max_processing_time <= 31536000))),
    CONSTRAINT task_types_max_retry_interval_check CHECK (((max_retry_interval >= '-31536000'::integer) AND (max_retry_interval <= 31536000))),
    CONSTRAINT task_types_max_retry_num_check CHECK (((max_retry_num >= 0) AND (max_retry_num <= 1000))),
    CONSTRAINT task_types_name_check CHECK ((task_type ~ '^[a-z][a-z0-9_]{0,39}$'::text)),
    CONSTRAINT task_types_queue_concurrency_check CHECK (((queue_concurrency >= 1) AND (queue_concurrency <= 1000000))),
    CONSTRAINT task_types_queue_max_starts_check CHECK (((queue_max_starts >= 1) AND (queue_max_starts <= 1000000))),
    CONSTRAINT task_types_queue_rate_check CHECK (((queue_max_starts IS NULL) = (queue_rate_period IS NULL))),
    CONSTRAINT task_types_queue_rate_period_check CHECK (((queue_rate_period >= (0.001)::double precision) AND (queue_rate_period <= (86400)::double precision))),
    CONSTRAINT task_types_retention_check CHECK (((retention >= 0) AND (retention <= 315360000))),
    CONSTRAINT task_types_schedule_interval_check CHECK (((schedule_interval >= (0.01)::double precision) AND (schedule_interval <= (86400)::double precision))),
    CONSTRAINT task_types_schedule_limit_check CHECK (((schedule_limit >= 1) AND (schedule_limit <= 10000))),
    CONSTRAINT task_types_shard_max_rows_check CHECK (((shard_max_rows >= 10) AND (shard_max_rows <= '1000000000000'::bigint)))
);

CREATE FUNCTION asyncflow.enqueue_task_type(p_task_type text) RETURNS asyncflow.task_types
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 10 lines, sha256 836428e7efd64d7b

CREATE FUNCTION asyncflow.ensure_run_day(p_day date) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 18 lines, sha256 b1fe35c82cb5419d

CREATE FUNCTION asyncflow.event_key_problem(p_key text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 5 lines, sha256 e8f00ca933cb96c6

CREATE FUNCTION asyncflow.event_payload_max_bytes() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select 65536 $$;

CREATE FUNCTION asyncflow.expire_waits(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 1000) RETURNS TABLE(task_id text, event_key text, timed_out boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 40 lines, sha256 0b84a356c03ba061

CREATE FUNCTION asyncflow.explain_task(task_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 125 lines, sha256 689bda1676827877

CREATE FUNCTION asyncflow.fail_unreadable(p_task_type text, p_shard integer, p_id bigint, p_why text, p_now timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 23 lines, sha256 093b924a626319bb

CREATE TABLE asyncflow.tasks (
    task_type text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    stage text NOT NULL,
    status asyncflow.task_status DEFAULT 'pending'::asyncflow.task_status NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    retry_count integer DEFAULT 0 NOT NULL,
    max_retry_num integer NOT NULL,
    max_retry_interval integer NOT NULL,
    claim_seq bigint DEFAULT 0 NOT NULL,
    owner text,
    claimed_at timestamp with time zone,
    lease_until timestamp with time zone,
    order_time timestamp with time zone NOT NULL,
    queue_key text,
    user_id text,
    idempotency_key text,
    context jsonb DEFAULT '{}'::jsonb NOT NULL,
    result jsonb,
    last_error text,
    schedule_log jsonb DEFAULT '[]'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    run_ref text,
    schedule text,
    tick timestamp with time zone,
    progress jsonb,
    traceparent text,
    wake jsonb,
    parent_id text
)
PARTITION BY LIST (task_type);

CREATE FUNCTION asyncflow.filter_tasks(p_filter jsonb, p_statuses asyncflow.task_status[], p_plain_only boolean, p_after text, p_limit integer, p_newest boolean) RETURNS SETOF asyncflow.tasks
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET plan_cache_mode TO 'force_custom_plan'
    AS -- body: 128 lines, sha256 b097a548f8e5b3e6

CREATE FUNCTION asyncflow.find_tasks(p_filter jsonb DEFAULT '{}'::jsonb, p_after text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_order text DEFAULT 'newest'::text) RETURNS SETOF jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 10 lines, sha256 e2e34c7ef8133435

CREATE FUNCTION asyncflow.fold_status_deltas() RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 14 lines, sha256 7fa6f8473ec539fc

CREATE FUNCTION asyncflow.format_task_id(p_task_type text, p_shard integer, p_id bigint) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 1 lines, sha256 aa6c0405db0774f1

CREATE FUNCTION asyncflow.get_pipeline(name text, version integer DEFAULT NULL::integer) RETURNS jsonb
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 3 lines, sha256 1b7076a93bf72338

CREATE FUNCTION asyncflow.get_run(run_id text) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 38 lines, sha256 ad44eb5408728c2b

CREATE FUNCTION asyncflow.get_task(task_id text) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 16 lines, sha256 acb3366acafd11d2

CREATE FUNCTION asyncflow.graph_index(p_ends integer[], p_nodes integer, OUT edges integer[], OUT at integer[]) RETURNS record
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 5 lines, sha256 84d371bb782e96ba

CREATE FUNCTION asyncflow.graph_reach(p_root integer, p_nodes integer, p_at integer[], p_edges integer[], p_far integer[], p_live boolean[] DEFAULT NULL::boolean[]) RETURNS boolean[]
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS -- body: 23 lines, sha256 f567d9caa684244e

CREATE FUNCTION asyncflow.heartbeat_worker(p_id text, p_host text, p_pid integer, p_types text[], p_in_flight integer, p_started_at timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 21 lines, sha256 f83edd6179a0f107

CREATE FUNCTION asyncflow.held_tasks(p_task_type text, p_owner text) RETURNS TABLE(task_id text, claim_seq bigint, stage text, attempt integer, lease_until timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 11 lines, sha256 1174748af564e350

CREATE FUNCTION asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamp with time zone, p_single boolean) RETURNS text[]
    LANGUAGE plpgsql
    AS -- body: 207 lines, sha256 930e175a09805f8a

CREATE FUNCTION asyncflow.is_integral(p_value jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 1 lines, sha256 19e7c1e882286493

CREATE FUNCTION asyncflow.is_jsonpath(p_text text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS -- body: 6 lines, sha256 8d72075db379df64

CREATE FUNCTION asyncflow.is_timestamptz(p_text text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS -- body: 5 lines, sha256 604aae6c9b878a54

CREATE FUNCTION asyncflow.join_counts(p_parent_ids text[]) RETURNS TABLE(task_type text, shard integer, id bigint, n bigint)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 2 lines, sha256 9273718f543ad5ba

CREATE FUNCTION asyncflow.json_ok(p_value jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 5 lines, sha256 7aea0835935487d1

CREATE FUNCTION asyncflow.json_out(p_doc jsonb, p_fields text[]) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS -- body: 24 lines, sha256 39960e1eaab66899

CREATE FUNCTION asyncflow.json_problem(p_value jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 8 lines, sha256 b4c4311b81aee95f

CREATE FUNCTION asyncflow.leave_leadership(p_id text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 1 lines, sha256 9d2b399a51b53b4c

CREATE FUNCTION asyncflow.list_pipelines() RETURNS SETOF jsonb
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 3 lines, sha256 d162ad45c3569936

CREATE FUNCTION asyncflow.list_runs(pipeline text DEFAULT NULL::text, status text DEFAULT NULL::text, p_limit integer DEFAULT 100, p_before text DEFAULT NULL::text) RETURNS SETOF jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 23 lines, sha256 2bd34bfb5f6eae02

CREATE FUNCTION asyncflow.list_schedules() RETURNS SETOF jsonb
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 1 lines, sha256 844774f9aa758bbf

CREATE FUNCTION asyncflow.list_task_types() RETURNS SETOF jsonb
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 1 lines, sha256 b2323d91b1873662

CREATE FUNCTION asyncflow.list_tasks(p_task_type text DEFAULT NULL::text, p_status asyncflow.task_status DEFAULT NULL::asyncflow.task_status, p_stage text DEFAULT NULL::text, p_user_id text DEFAULT NULL::text, p_after text DEFAULT NULL::text, p_limit integer DEFAULT 100) RETURNS SETOF jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 4 lines, sha256 38d50ee281a8ee03

CREATE FUNCTION asyncflow.list_workers(p_within_seconds double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(id text, host text, pid integer, types text[], in_flight integer, started_at timestamp with time zone, last_seen timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 3 lines, sha256 50305a2e664580a3

CREATE FUNCTION asyncflow.maintenance_due(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 12 lines, sha256 400e9cacea83bf2b

CREATE FUNCTION asyncflow.maintenance_functions() RETURNS SETOF text
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 5 lines, sha256 602b4d477d51e181

CREATE FUNCTION asyncflow.match_waits(p_task_type text, p_task_ids text[], p_now timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS -- body: 37 lines, sha256 2b1455ec5904c421

CREATE FUNCTION asyncflow.max_context_bytes() RETURNS integer
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 1 lines, sha256 48a673d1a77b153e

CREATE FUNCTION asyncflow.missing_grants(p_role text, p_task_types text[] DEFAULT NULL::text[]) RETURNS text[]
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 14 lines, sha256 8653bccf66107293

CREATE FUNCTION asyncflow.next_claim_seq(p_claim_seq bigint) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS -- body: 1 lines, sha256 99f59c1088e8124c

CREATE FUNCTION asyncflow.next_due(p_task_type text) RETURNS timestamp with time zone
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_sort TO 'off'
    AS -- body: 24 lines, sha256 dd4e9e9321cd2b57

CREATE FUNCTION asyncflow.note_leader(p_id text, p_host text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 12 lines, sha256 909dfb4a391e2432

CREATE FUNCTION asyncflow.note_schedule(p_name text, p_next_tick timestamp with time zone, p_error text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 7 lines, sha256 66161c9f77bfca92

CREATE FUNCTION asyncflow.notify_waiters(p_task_type text, p_task_ids text[]) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 7 lines, sha256 ba5c168694c2844b

CREATE FUNCTION asyncflow.notify_waiters(p_task_type text, p_shards integer[], p_ids bigint[]) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 27 lines, sha256 9614cbf4d38c6878

CREATE FUNCTION asyncflow.now_ok(p_now timestamp with time zone) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 3 lines, sha256 2679eb18dab7798c

CREATE FUNCTION asyncflow.parse_task_id(p_task_id text, OUT task_type text, OUT shard integer, OUT id bigint) RETURNS record
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 2 lines, sha256 6c4ad30ff753c68a

CREATE FUNCTION asyncflow.pause_schedule(name text, p_paused boolean, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 10 lines, sha256 5da15f1aeb7de77c

CREATE FUNCTION asyncflow.pipeline_error(p_message text) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 4 lines, sha256 64584c1fa4978cdd

CREATE TABLE asyncflow.pipelines (
    name text NOT NULL,
    version integer NOT NULL,
    status text NOT NULL,
    definition jsonb NOT NULL,
    plan jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT pipelines_name_check CHECK ((name ~ '^[a-z][a-z0-9_]{0,39}$'::text)),
    CONSTRAINT pipelines_status_check CHECK ((status = ANY (ARRAY['draft'::text, 'active'::text, 'retired'::text]))),
    CONSTRAINT pipelines_version_check CHECK ((version >= 1))
);

CREATE FUNCTION asyncflow.pipeline_json(p asyncflow.pipelines) RETURNS jsonb
    LANGUAGE sql STABLE
    AS -- body: 2 lines, sha256 249af26d27e33232

CREATE FUNCTION asyncflow.plan_step_limit() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select 300 $$;

CREATE FUNCTION asyncflow.plan_steps(p_plan jsonb, OUT plan jsonb, OUT path text[]) RETURNS record
    LANGUAGE plpgsql STABLE
    AS -- body: 165 lines, sha256 bfa8da0b39fc7e79

CREATE FUNCTION asyncflow.progress_too_large(p_progress jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 2 lines, sha256 47cf874e3d299eb4

CREATE FUNCTION asyncflow.prune_rate_buckets(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 26 lines, sha256 9c6f5c95c23aad91

CREATE FUNCTION asyncflow.prune_workers(p_stale_seconds double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 8 lines, sha256 ca04d4398e323b7d

CREATE FUNCTION asyncflow.put_pipeline(name text, definition jsonb, status text DEFAULT 'active'::text) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 37 lines, sha256 9d7ef9e2ba387aa0

CREATE FUNCTION asyncflow.queue_depth_rows() RETURNS TABLE(task_type text, ready bigint, delayed bigint, running bigint, oldest_ready_age double precision, paused boolean, held bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 33 lines, sha256 558eaf3141fdab98

CREATE FUNCTION asyncflow.queue_keys(p_task_type text, p_after text DEFAULT NULL::text, p_limit integer DEFAULT 100) RETURNS TABLE(queue_key text, ready bigint, delayed bigint, running bigint, oldest_ready_age double precision, concurrency integer)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 54 lines, sha256 05868381afdff90e

CREATE FUNCTION asyncflow.queue_rate_allowance(p_type asyncflow.task_types, p_keys text[], p_now timestamp with time zone) RETURNS TABLE(queue_key text, allowance integer)
    LANGUAGE plpgsql
    AS -- body: 17 lines, sha256 62e3f96a414cb8ff

CREATE FUNCTION asyncflow.queue_rate_spend(p_task_type text, p_keys text[]) RETURNS void
    LANGUAGE sql
    AS -- body: 3 lines, sha256 46f68a447172fb1f

CREATE FUNCTION asyncflow.raise_error(p_code text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 4 lines, sha256 6e902ec7cc94598f

CREATE FUNCTION asyncflow.rate_allowance(p_task_type text, p_now timestamp with time zone) RETURNS integer
    LANGUAGE sql
    AS -- body: 6 lines, sha256 fd3256c71e1f1dc2

CREATE FUNCTION asyncflow.rate_spend(p_task_type text, p_started integer) RETURNS void
    LANGUAGE sql
    AS -- body: 1 lines, sha256 5d04faf5a1df0948

CREATE FUNCTION asyncflow.record_callback(p_callback_id text, p_attempt integer, p_http_status integer, p_error text, p_cost_ms integer, p_give_up boolean DEFAULT false, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 33 lines, sha256 c4f1d64d0299d187

CREATE FUNCTION asyncflow.refresh_enqueue_info(p_task_type text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 12 lines, sha256 1b4f88707853fef9

CREATE FUNCTION asyncflow.register_task_type(task_type text, settings jsonb DEFAULT '{}'::jsonb) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 77 lines, sha256 31f35d2634649252

CREATE FUNCTION asyncflow.release_schedule_tick(p_name text, p_tick timestamp with time zone, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 38 lines, sha256 e2840b7cd2d93258

CREATE FUNCTION asyncflow.remove_schedule(name text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 4 lines, sha256 be39451313321399

CREATE FUNCTION asyncflow.remove_worker(p_id text) RETURNS boolean
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 2 lines, sha256 b7e8353d507b62ae

CREATE FUNCTION asyncflow.render_template(p_name text, p_task_type text, p_variant text DEFAULT 'claim'::text) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 24 lines, sha256 2faf32c511345682

CREATE FUNCTION asyncflow.report_task_arrays(p_owner text, p_task_ids text[], p_claim_seqs bigint[], p_outcomes text[], p_stages text[] DEFAULT NULL::text[], p_contexts jsonb[] DEFAULT NULL::jsonb[], p_results jsonb[] DEFAULT NULL::jsonb[], p_errors text[] DEFAULT NULL::text[], p_retries boolean[] DEFAULT NULL::boolean[], p_delays double precision[] DEFAULT NULL::double precision[], p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_progress jsonb[] DEFAULT NULL::jsonb[]) RETURNS TABLE(task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    AS -- body: 30 lines, sha256 02795ca33489656f

CREATE FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(task_id text, accepted boolean, status asyncflow.task_status, lease_until timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 58 lines, sha256 69eec949a09944c1

CREATE FUNCTION asyncflow.rescue_expired(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, p_limit integer DEFAULT 1000, p_skip_owners text[] DEFAULT NULL::text[]) RETURNS TABLE(task_id text, task_type text, status asyncflow.task_status, stage text, attempt integer, error text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 67 lines, sha256 fab71bfac73bd7de

CREATE FUNCTION asyncflow.retry_backoff(p_attempt integer, p_max integer) RETURNS interval
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 4 lines, sha256 a521534da0e65ab5

CREATE FUNCTION asyncflow.retry_node(run_id text, node text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 45 lines, sha256 8557d56901a33347

CREATE FUNCTION asyncflow.retry_run(run_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 19 lines, sha256 072d6ba790c19e7e

CREATE FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 48 lines, sha256 d3542db37dae4235

CREATE FUNCTION asyncflow.retry_wait(p_attempt integer, p_max integer) RETURNS interval
    LANGUAGE sql PARALLEL SAFE
    AS -- body: 1 lines, sha256 3b254a24c77e9c5a

CREATE FUNCTION asyncflow.roll_shard(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 31 lines, sha256 f50c1314958cc51a

CREATE FUNCTION asyncflow.run_day(p_id text) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 8 lines, sha256 e112d0fda4467a92

CREATE TABLE asyncflow.runs (
    day date NOT NULL,
    run_id text NOT NULL,
    pipeline text NOT NULL,
    version integer NOT NULL,
    status asyncflow.run_status NOT NULL,
    input jsonb NOT NULL,
    result jsonb,
    error text,
    notify_url text,
    notify_key text,
    parent_event text,
    depth integer DEFAULT 0 NOT NULL,
    attempt integer DEFAULT 1 NOT NULL,
    retry_of text,
    retried_by text,
    run_at timestamp with time zone NOT NULL,
    deadline timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    total_cost_ms bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    sub_runs integer DEFAULT 0 NOT NULL,
    schedule text,
    tick timestamp with time zone,
    idempotency_key text,
    traceparent text
)
PARTITION BY RANGE (day);

COMMENT ON COLUMN asyncflow.runs.sub_runs IS 'on a root run: the sub-pipeline runs started in its tree, at most 1000';

CREATE FUNCTION asyncflow.run_json(r asyncflow.runs) RETURNS jsonb
    LANGUAGE sql STABLE
    AS -- body: 7 lines, sha256 1074da3fdd052782

CREATE FUNCTION asyncflow.sample_stats(p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 46 lines, sha256 7e50ef5e45d871ce

CREATE TABLE asyncflow.schedules (
    name text NOT NULL,
    cron text NOT NULL,
    time_zone text DEFAULT 'UTC'::text NOT NULL,
    task_type text,
    pipeline text,
    spec jsonb NOT NULL,
    missed text DEFAULT 'skip'::text NOT NULL,
    max_catch_up integer DEFAULT 10 NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    since timestamp with time zone NOT NULL,
    next_tick timestamp with time zone,
    last_tick timestamp with time zone,
    last_task_id text,
    last_run_id text,
    last_released_at timestamp with time zone,
    error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_check CHECK (((task_type IS NULL) <> (pipeline IS NULL))),
    CONSTRAINT schedules_cron_check CHECK (((length(cron) >= 1) AND (length(cron) <= 200))),
    CONSTRAINT schedules_max_catch_up_check CHECK (((max_catch_up >= 1) AND (max_catch_up <= 1000))),
    CONSTRAINT schedules_missed_check CHECK ((missed = ANY (ARRAY['skip'::text, 'last'::text, 'all'::text]))),
    CONSTRAINT schedules_name_check CHECK ((name ~ '^[a-z][a-z0-9_.-]{0,63}$'::text)),
    CONSTRAINT schedules_pipeline_check CHECK ((pipeline ~ '^[a-z][a-z0-9_]{0,39}$'::text)),
    CONSTRAINT schedules_task_type_check CHECK ((task_type ~ '^[a-z][a-z0-9_]{0,39}$'::text))
);

CREATE FUNCTION asyncflow.schedule_json(s asyncflow.schedules) RETURNS jsonb
    LANGUAGE sql STABLE
    AS -- body: 5 lines, sha256 47a8a889f4a3acbc

CREATE FUNCTION asyncflow.schema_state() RETURNS TABLE(version bigint, sql_api_checksum text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 2 lines, sha256 81492f9347c09197

CREATE FUNCTION asyncflow.send_event(event_key text, payload jsonb DEFAULT '{}'::jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 40 lines, sha256 0a53e166918228b4

CREATE FUNCTION asyncflow.set_pipeline_status(name text, version integer, status text) RETURNS asyncflow.pipelines
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 23 lines, sha256 b8edb3476b766102

CREATE FUNCTION asyncflow.set_progress(p_task_id text, p_claim_seq bigint, p_progress jsonb) RETURNS TABLE(accepted boolean, status asyncflow.task_status)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 40 lines, sha256 ca5d59bc92e28e78

CREATE FUNCTION asyncflow.set_queue_indexes(p_task_type text, p_on boolean) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 22 lines, sha256 29dbeae400ec37d8

CREATE FUNCTION asyncflow.set_queue_limit(p_task_type text, p_queue_key text, p_concurrency integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 39 lines, sha256 adea781dba7b642d

CREATE FUNCTION asyncflow.set_queue_rate_limit(p_task_type text, p_queue_key text, p_max_starts integer, p_period double precision DEFAULT 1, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 65 lines, sha256 d9c5f28fa23a41ed

CREATE FUNCTION asyncflow.set_rate_limit(task_type text, max_starts integer, period double precision DEFAULT 1, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 24 lines, sha256 db87ff8af6d628aa

CREATE FUNCTION asyncflow.set_schedule(name text, cron text, spec jsonb, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 129 lines, sha256 f27984ed1d963908

CREATE FUNCTION asyncflow.shard_is_live(p_task_type text, p_shard integer) RETURNS boolean
    LANGUAGE sql STABLE
    AS -- body: 4 lines, sha256 28195781aeb245be

CREATE FUNCTION asyncflow.shard_positions(p_task_type text DEFAULT NULL::text) RETURNS TABLE(task_type text, begin_pos integer, end_pos integer, shards bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 5 lines, sha256 5296d2788b89f354

CREATE FUNCTION asyncflow.shorten(p_text text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 2 lines, sha256 4eec34340cb56e3a

CREATE FUNCTION asyncflow.spawn_children(p_task_type text, p_task_ids text[], p_now timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 47 lines, sha256 74e2f4ba63fa29d1

CREATE FUNCTION asyncflow.spawn_max_children() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select 100000 $$;

CREATE FUNCTION asyncflow.spawn_problem(p_spawn jsonb) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 30 lines, sha256 56934a49bb463880

CREATE FUNCTION asyncflow.stage_ok(p_stage text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 1 lines, sha256 4a922ebc4352ebea

CREATE FUNCTION asyncflow.stage_time_bounds() RETURNS double precision[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 1 lines, sha256 338de94b7a964063

CREATE FUNCTION asyncflow.stage_time_totals() RETURNS TABLE(task_type text, stage text, calls bigint, seconds double precision, bounds double precision[], buckets bigint[])
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 5 lines, sha256 cf200d72fcc61754

CREATE FUNCTION asyncflow.start_run(pipeline text, input jsonb DEFAULT '{}'::jsonb, notify_url text DEFAULT NULL::text, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, notify_key text DEFAULT NULL::text, version integer DEFAULT NULL::integer, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone, idempotency_key text DEFAULT NULL::text, traceparent text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 27 lines, sha256 0dd87511d6351a23

CREATE FUNCTION asyncflow.stats_history(p_task_type text, p_range text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS TABLE(at timestamp with time zone, succeeded bigint, failed bigint, retried bigint, ready bigint, running bigint, lag_seconds double precision)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 22 lines, sha256 b61057bbe309f5e3

CREATE FUNCTION asyncflow.status_counts() RETURNS TABLE(task_type text, pending bigint, running bigint, succeeded bigint, failed bigint, cancelled bigint, waiting bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 12 lines, sha256 39de8f8e99b4b118

CREATE FUNCTION asyncflow.take_lead(p_id text, p_host text, p_lease_seconds double precision, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 20 lines, sha256 3eeac3ab51d78d66

CREATE FUNCTION asyncflow.task_children(task_id text, p_limit integer DEFAULT 100) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 19 lines, sha256 76e6f70a5e61ffc9

CREATE FUNCTION asyncflow.task_counter_totals() RETURNS TABLE(task_type text, claimed bigint, succeeded bigint, failed bigint, retried bigint, rescued bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 3 lines, sha256 da7a7431c4c43ab4

CREATE FUNCTION asyncflow.task_created_here(p_task_id text) RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 12 lines, sha256 d52664f29d4df929

CREATE FUNCTION asyncflow.task_json(t asyncflow.tasks) RETURNS jsonb
    LANGUAGE sql STABLE
    AS -- body: 11 lines, sha256 928358d34dc31425

CREATE FUNCTION asyncflow.task_log(t asyncflow.tasks) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    AS -- body: 5 lines, sha256 49a2a31e9f2b758e

CREATE FUNCTION asyncflow.task_type_figures() RETURNS TABLE(task_type text, created bigint, pending bigint, running bigint, succeeded bigint, failed bigint, cancelled bigint, oldest_running_age double precision, waiting bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS -- body: 11 lines, sha256 33f468236b1513b7

CREATE FUNCTION asyncflow.task_type_json(p asyncflow.task_types) RETURNS jsonb
    LANGUAGE sql STABLE
    AS -- body: 18 lines, sha256 4c3f64232b164307

CREATE FUNCTION asyncflow.tg_enqueue_info() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 12 lines, sha256 e96e393d8a660697

CREATE FUNCTION asyncflow.tg_joins__ended() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 4 lines, sha256 66edbcb695415ee4

CREATE FUNCTION asyncflow.tg_task_types__functions() RETURNS trigger
    LANGUAGE plpgsql
    AS -- body: 4 lines, sha256 b9f1f1bfd6bed5cc

CREATE FUNCTION asyncflow.tg_task_types__resumed() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 4 lines, sha256 2e9873843f67496c

CREATE FUNCTION asyncflow.tg_tasks__workflow() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 30 lines, sha256 77cc0926c65bebee

CREATE FUNCTION asyncflow.traceparent_ok(p_traceparent text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 3 lines, sha256 f93a05cfc2f2664e

CREATE FUNCTION asyncflow.uncount_child_end(p_parent_id text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 3 lines, sha256 a12e14334bdc8472

CREATE FUNCTION asyncflow.unreadable(p_field text, p_value jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS -- body: 2 lines, sha256 67126753e4031f20

CREATE FUNCTION asyncflow.wait_for_hold(p_task_type text, p_shard integer, p_id bigint, p_claim_seq bigint) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '5s'
    AS -- body: 8 lines, sha256 99217792e9eea51a

CREATE FUNCTION asyncflow.wake(p_task_type text) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 5 lines, sha256 9f8998885df2eaf5

CREATE FUNCTION asyncflow.watch_task(task_id text, p_seconds double precision) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 45 lines, sha256 f241aaef8603c87b

CREATE FUNCTION asyncflow.wf_activate(p_run asyncflow.runs, p_node text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 126 lines, sha256 8c6764366f282385

CREATE FUNCTION asyncflow.wf_arrive(p_run asyncflow.runs, p_node text, p_live boolean, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 27 lines, sha256 9a05c05ff6139a28

CREATE FUNCTION asyncflow.wf_begin_run(p_run_id text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 14 lines, sha256 937997ece55e6510

CREATE FUNCTION asyncflow.wf_cancel_task(p_task_id text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 7 lines, sha256 c7ebd280c231bfb2

CREATE FUNCTION asyncflow.wf_close_event_work(p_day date, p_event_id text, p_task_id text, p_child_run text, p_node_type text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 22 lines, sha256 a84bfcd17b6242e3

CREATE FUNCTION asyncflow.wf_complete_event(p_event_id text, p_result jsonb, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 26 lines, sha256 367b98a657826359

CREATE FUNCTION asyncflow.wf_create_tasks(p_node jsonb, p_contexts jsonb, p_refs text[], p_traceparent text DEFAULT NULL::text) RETURNS text[]
    LANGUAGE plpgsql
    AS -- body: 13 lines, sha256 29a51f346f563ca3

CREATE FUNCTION asyncflow.wf_data(p_run asyncflow.runs) RETURNS jsonb
    LANGUAGE sql STABLE
    AS -- body: 3 lines, sha256 68d56809efca4dbb

CREATE TABLE asyncflow.run_events (
    day date NOT NULL,
    event_id text NOT NULL,
    run_id text NOT NULL,
    node text NOT NULL,
    node_type text NOT NULL,
    status text DEFAULT 'waiting'::text NOT NULL,
    cancelled_from text,
    in_degree integer NOT NULL,
    latch_cnt integer DEFAULT 0 NOT NULL,
    live_cnt integer DEFAULT 0 NOT NULL,
    exec_cnt integer DEFAULT 0 NOT NULL,
    activations integer DEFAULT 0 NOT NULL,
    segment_cnt integer DEFAULT 0 NOT NULL,
    segments_done integer DEFAULT 0 NOT NULL,
    task_id text,
    child_run text,
    result jsonb,
    error text,
    deadline timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    total_cost_ms bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT run_events_status_check CHECK ((status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text, 'external'::text, 'succeeded'::text, 'failed'::text, 'skipped'::text, 'cancelled'::text])))
)
PARTITION BY RANGE (day);

CREATE FUNCTION asyncflow.wf_end_event(p_event_id text, p_status text, p_result jsonb, p_error text, p_now timestamp with time zone) RETURNS asyncflow.run_events
    LANGUAGE plpgsql
    AS -- body: 12 lines, sha256 746d7a63ad3b8ae3

CREATE FUNCTION asyncflow.wf_enqueue_callback(p_run asyncflow.runs, p_kind text, p_event_id text, p_url text, p_payload jsonb, p_now timestamp with time zone) RETURNS text
    LANGUAGE plpgsql
    AS -- body: 10 lines, sha256 e42721ec50ad1fc2

CREATE FUNCTION asyncflow.wf_fail_event(p_event_id text, p_error text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 11 lines, sha256 f5a7be1f4a59ed0a

CREATE FUNCTION asyncflow.wf_finish_run(p_run_id text, p_status asyncflow.run_status, p_result jsonb, p_error text, p_now timestamp with time zone, p_notify boolean DEFAULT true) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 57 lines, sha256 c507d85671a1d6af

CREATE FUNCTION asyncflow.wf_get_run(p_run_id text) RETURNS asyncflow.runs
    LANGUAGE sql STABLE
    AS -- body: 1 lines, sha256 683a17ffe3ff448d

CREATE FUNCTION asyncflow.wf_inputs(p_run asyncflow.runs, p_node jsonb) RETURNS jsonb
    LANGUAGE sql STABLE
    AS -- body: 4 lines, sha256 01136d535801ba11

CREATE FUNCTION asyncflow.wf_keep_place(p_old_task_id text, p_new_task_id text) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 16 lines, sha256 1fbedb303fc32234

CREATE FUNCTION asyncflow.wf_new_run(p_pipeline text, p_version integer, p_input jsonb, p_notify_url text, p_notify_key text, p_run_at timestamp with time zone, p_parent_event text, p_depth integer, p_attempt integer, p_retry_of text, p_now timestamp with time zone, p_traceparent text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS -- body: 57 lines, sha256 4b190b4024293577

CREATE FUNCTION asyncflow.wf_node_context(p_run asyncflow.runs, p_node text, p_inputs jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS -- body: 2 lines, sha256 9e1418f05f800af0

CREATE FUNCTION asyncflow.wf_node_timeout(p_run_id text, p_node text) RETURNS interval
    LANGUAGE sql STABLE
    AS -- body: 2 lines, sha256 59ba5a81ababe456

CREATE FUNCTION asyncflow.wf_plan(p_run asyncflow.runs) RETURNS jsonb
    LANGUAGE sql STABLE
    AS -- body: 1 lines, sha256 39eac4ea59c90855

CREATE FUNCTION asyncflow.wf_rerun_event(p_run asyncflow.runs, p_event asyncflow.run_events, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 24 lines, sha256 65396adf11c9009e

CREATE FUNCTION asyncflow.wf_run_error(p_code text, p_message text) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 4 lines, sha256 6e902ec7cc94598f

CREATE FUNCTION asyncflow.wf_run_for_update(p_run_id text) RETURNS asyncflow.runs
    LANGUAGE plpgsql
    AS -- body: 9 lines, sha256 fa421e569bc93967

CREATE FUNCTION asyncflow.wf_start_segments(p_run asyncflow.runs, p_node text, p_def jsonb, p_inputs jsonb, p_ns integer[], p_items jsonb[], p_count integer, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 20 lines, sha256 f3d342b76390ba6f

CREATE FUNCTION asyncflow.wf_task_changed(p_ref text, p_task_id text, p_status asyncflow.task_status, p_result jsonb, p_error text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 71 lines, sha256 79e8298005ecd8ae

CREATE FUNCTION asyncflow.wf_watch_type(p_task_type text) RETURNS void
    LANGUAGE plpgsql
    AS -- body: 10 lines, sha256 98584acb22c3415e

CREATE FUNCTION asyncflow.workflow_figures() RETURNS TABLE(pipeline text, kind text, status text, n bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS -- body: 7 lines, sha256 313476a71fc2fbbe

CREATE SEQUENCE asyncflow.callback_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

CREATE TABLE asyncflow.callbacks (
    day date NOT NULL,
    callback_id text NOT NULL,
    run_id text NOT NULL,
    kind text NOT NULL,
    event_id text,
    url text NOT NULL,
    payload jsonb NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    owner text,
    give_up_at timestamp with time zone NOT NULL,
    last_error text,
    log jsonb DEFAULT '[]'::jsonb NOT NULL,
    delivered_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT callbacks_kind_check CHECK ((kind = ANY (ARRAY['run'::text, 'node'::text]))),
    CONSTRAINT callbacks_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text, 'cancelled'::text])))
)
PARTITION BY RANGE (day);

CREATE TABLE asyncflow.config (
    singleton boolean DEFAULT true NOT NULL,
    max_context_bytes integer DEFAULT 1048576 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    run_retention integer DEFAULT 604800 NOT NULL,
    callback_give_up integer DEFAULT 86400 NOT NULL,
    callback_max_interval integer DEFAULT 300 NOT NULL,
    event_retention integer DEFAULT 86400 NOT NULL,
    CONSTRAINT config_callback_give_up_check CHECK (((callback_give_up >= 1) AND (callback_give_up <= 31536000))),
    CONSTRAINT config_callback_max_interval_check CHECK (((callback_max_interval >= 1) AND (callback_max_interval <= 86400))),
    CONSTRAINT config_event_retention_check CHECK (((event_retention >= 1) AND (event_retention <= 31536000))),
    CONSTRAINT config_max_context_bytes_check CHECK (((max_context_bytes >= 1024) AND (max_context_bytes <= 268435456))),
    CONSTRAINT config_run_retention_check CHECK (((run_retention >= 60) AND (run_retention <= 315360000))),
    CONSTRAINT config_singleton_check CHECK (singleton)
);

CREATE TABLE asyncflow.debounce_keys (
    task_type text NOT NULL,
    debounce_key text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    start_at timestamp with time zone NOT NULL,
    CONSTRAINT debounce_keys_debounce_key_check CHECK (((length(debounce_key) >= 1) AND (length(debounce_key) <= 255)))
);

CREATE TABLE asyncflow.enqueue_info (
    task_type text NOT NULL,
    end_pos integer NOT NULL,
    id_seq regclass NOT NULL,
    initial_stage text NOT NULL,
    max_retry_num integer NOT NULL,
    max_retry_interval integer NOT NULL,
    max_context_bytes integer NOT NULL
);

CREATE TABLE asyncflow.events (
    id bigint NOT NULL,
    event_key text NOT NULL,
    payload jsonb NOT NULL,
    sent_at timestamp with time zone NOT NULL
);

ALTER TABLE asyncflow.events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME asyncflow.events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE asyncflow.function_templates (
    name text NOT NULL,
    body text NOT NULL
);

CREATE TABLE asyncflow.idempotency_keys (
    task_type text NOT NULL,
    idempotency_key text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE asyncflow.joins (
    task_type text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    total integer DEFAULT 0 NOT NULL,
    ended integer DEFAULT 0 NOT NULL,
    children text[],
    spawn jsonb,
    since timestamp with time zone NOT NULL
);

CREATE TABLE asyncflow.maintenance_leader (
    one boolean DEFAULT true NOT NULL,
    id text NOT NULL,
    host text NOT NULL,
    since timestamp with time zone NOT NULL,
    last_seen timestamp with time zone NOT NULL,
    CONSTRAINT maintenance_leader_one_check CHECK (one)
);

CREATE TABLE asyncflow.pipeline_counters (
    pipeline text NOT NULL,
    status asyncflow.run_status NOT NULL,
    slot smallint NOT NULL,
    runs bigint DEFAULT 0 NOT NULL
);

CREATE TABLE asyncflow.positions (
    task_type text NOT NULL,
    begin_pos integer DEFAULT 1 NOT NULL,
    end_pos integer DEFAULT 1 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT positions_begin_pos_check CHECK ((begin_pos >= 1)),
    CONSTRAINT positions_check CHECK ((begin_pos <= end_pos))
);

CREATE TABLE asyncflow.queue_cursors (
    task_type text NOT NULL,
    after_key text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE VIEW asyncflow.queue_depth AS
 SELECT q.task_type,
    q.ready,
    q.delayed,
    q.running,
    q.oldest_ready_age,
    q.paused,
    q.held
   FROM asyncflow.queue_depth_rows() q(task_type, ready, delayed, running, oldest_ready_age, paused, held);

CREATE TABLE asyncflow.queue_limits (
    task_type text NOT NULL,
    queue_key text NOT NULL,
    concurrency integer NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT queue_limits_concurrency_check CHECK (((concurrency >= 0) AND (concurrency <= 1000000))),
    CONSTRAINT queue_limits_queue_key_check CHECK ((length(queue_key) <= 255))
);

CREATE TABLE asyncflow.queue_rate_limits (
    task_type text NOT NULL,
    queue_key text NOT NULL,
    max_starts integer,
    period double precision,
    tokens double precision NOT NULL,
    refilled_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT queue_rate_limits_check CHECK (((max_starts IS NULL) = (period IS NULL))),
    CONSTRAINT queue_rate_limits_max_starts_check CHECK (((max_starts >= 1) AND (max_starts <= 1000000))),
    CONSTRAINT queue_rate_limits_period_check CHECK (((period >= (0.001)::double precision) AND (period <= (86400)::double precision))),
    CONSTRAINT queue_rate_limits_queue_key_check CHECK ((length(queue_key) <= 255))
);

CREATE TABLE asyncflow.rate_limits (
    task_type text NOT NULL,
    max_starts integer NOT NULL,
    period double precision NOT NULL,
    tokens double precision NOT NULL,
    refilled_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT rate_limits_max_starts_check CHECK (((max_starts >= 1) AND (max_starts <= 1000000))),
    CONSTRAINT rate_limits_period_check CHECK (((period >= (0.001)::double precision) AND (period <= (86400)::double precision)))
);

CREATE TABLE asyncflow.refinery_schema_history (
    version integer NOT NULL,
    name character varying(255),
    applied_on character varying(255),
    checksum character varying(255)
);

CREATE TABLE asyncflow.run_days (
    day date NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    dropped_at timestamp with time zone
);

CREATE TABLE asyncflow.run_idempotency_keys (
    pipeline text NOT NULL,
    idempotency_key text NOT NULL,
    run_id text NOT NULL,
    day date NOT NULL,
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT run_idempotency_keys_idempotency_key_check CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255)))
);

CREATE TABLE asyncflow.run_segments (
    day date NOT NULL,
    segment_id text NOT NULL,
    event_id text NOT NULL,
    run_id text NOT NULL,
    n integer NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    exec_cnt integer DEFAULT 0 NOT NULL,
    activations integer DEFAULT 1 NOT NULL,
    item jsonb,
    task_id text,
    result jsonb,
    error text,
    deadline timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    total_cost_ms bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT run_segments_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))
)
PARTITION BY RANGE (day);

CREATE TABLE asyncflow.run_traces (
    day date NOT NULL,
    trace_id uuid DEFAULT gen_random_uuid() NOT NULL,
    run_id text NOT NULL,
    event_id text NOT NULL,
    segment_id text,
    task_id text NOT NULL,
    stage text,
    attempt integer,
    worker text,
    outcome text,
    request jsonb,
    response jsonb,
    error text,
    started_at timestamp with time zone,
    cost_ms bigint,
    created_at timestamp with time zone NOT NULL
)
PARTITION BY RANGE (day);

CREATE TABLE asyncflow.schedule_ticks (
    schedule text NOT NULL,
    tick timestamp with time zone NOT NULL,
    task_id text,
    run_id text,
    created_at timestamp with time zone NOT NULL
);

CREATE TABLE asyncflow.shards (
    task_type text NOT NULL,
    shard integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    closed_at timestamp with time zone,
    dropped_at timestamp with time zone
);

CREATE TABLE asyncflow.sql_api (
    singleton boolean DEFAULT true NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT sql_api_singleton_check CHECK (singleton)
);

CREATE TABLE asyncflow.stage_times (
    task_type text NOT NULL,
    stage text NOT NULL,
    slot smallint NOT NULL,
    calls bigint DEFAULT 0 NOT NULL,
    seconds double precision DEFAULT 0 NOT NULL,
    buckets bigint[] NOT NULL
);

CREATE TABLE asyncflow.stats_last (
    task_type text NOT NULL,
    at timestamp with time zone NOT NULL,
    succeeded bigint NOT NULL,
    failed bigint NOT NULL,
    retried bigint NOT NULL
);

CREATE TABLE asyncflow.stats_points (
    task_type text NOT NULL,
    resolution integer NOT NULL,
    slot integer NOT NULL,
    at timestamp with time zone NOT NULL,
    succeeded bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    retried bigint DEFAULT 0 NOT NULL,
    ready bigint DEFAULT 0 NOT NULL,
    running bigint DEFAULT 0 NOT NULL,
    lag_seconds double precision DEFAULT 0 NOT NULL,
    CONSTRAINT stats_points_resolution_check CHECK ((resolution = ANY (ARRAY[60, 3600])))
);

CREATE TABLE asyncflow.status_deltas (
    task_type text NOT NULL,
    in_pending bigint DEFAULT 0 NOT NULL,
    in_running bigint DEFAULT 0 NOT NULL,
    in_succeeded bigint DEFAULT 0 NOT NULL,
    in_failed bigint DEFAULT 0 NOT NULL,
    in_cancelled bigint DEFAULT 0 NOT NULL,
    in_waiting bigint DEFAULT 0 NOT NULL
);

CREATE TABLE asyncflow.task_waiters (
    task_type text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    until timestamp with time zone NOT NULL
);

CREATE TABLE asyncflow.type_counters (
    task_type text NOT NULL,
    slot smallint NOT NULL,
    claimed bigint DEFAULT 0 NOT NULL,
    succeeded bigint DEFAULT 0 NOT NULL,
    failed bigint DEFAULT 0 NOT NULL,
    retried bigint DEFAULT 0 NOT NULL,
    rescued bigint DEFAULT 0 NOT NULL,
    in_pending bigint DEFAULT 0 NOT NULL,
    in_running bigint DEFAULT 0 NOT NULL,
    in_succeeded bigint DEFAULT 0 NOT NULL,
    in_failed bigint DEFAULT 0 NOT NULL,
    in_cancelled bigint DEFAULT 0 NOT NULL,
    in_waiting bigint DEFAULT 0 NOT NULL
);

CREATE TABLE asyncflow.unique_keys (
    task_type text NOT NULL,
    unique_key text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT unique_keys_unique_key_check CHECK (((length(unique_key) >= 1) AND (length(unique_key) <= 255)))
);

CREATE TABLE asyncflow.waits (
    task_type text NOT NULL,
    shard integer NOT NULL,
    id bigint NOT NULL,
    event_key text NOT NULL,
    since timestamp with time zone NOT NULL,
    until timestamp with time zone NOT NULL
);

CREATE TABLE asyncflow.workers (
    id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    types text[] NOT NULL,
    in_flight integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    last_seen timestamp with time zone NOT NULL
);

ALTER TABLE ONLY asyncflow.callbacks
    ADD CONSTRAINT callbacks_pkey PRIMARY KEY (callback_id, day);

ALTER TABLE ONLY asyncflow.config
    ADD CONSTRAINT config_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY asyncflow.debounce_keys
    ADD CONSTRAINT debounce_keys_pkey PRIMARY KEY (task_type, debounce_key);

ALTER TABLE ONLY asyncflow.enqueue_info
    ADD CONSTRAINT enqueue_info_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY asyncflow.function_templates
    ADD CONSTRAINT function_templates_pkey PRIMARY KEY (name);

ALTER TABLE ONLY asyncflow.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (task_type, idempotency_key);

ALTER TABLE ONLY asyncflow.joins
    ADD CONSTRAINT joins_pkey PRIMARY KEY (task_type, shard, id);

ALTER TABLE ONLY asyncflow.maintenance_leader
    ADD CONSTRAINT maintenance_leader_pkey PRIMARY KEY (one);

ALTER TABLE ONLY asyncflow.pipeline_counters
    ADD CONSTRAINT pipeline_counters_pkey PRIMARY KEY (pipeline, status, slot);

ALTER TABLE ONLY asyncflow.pipelines
    ADD CONSTRAINT pipelines_pkey PRIMARY KEY (name, version);

ALTER TABLE ONLY asyncflow.positions
    ADD CONSTRAINT positions_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.queue_cursors
    ADD CONSTRAINT queue_cursors_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.queue_limits
    ADD CONSTRAINT queue_limits_pkey PRIMARY KEY (task_type, queue_key);

ALTER TABLE ONLY asyncflow.queue_rate_limits
    ADD CONSTRAINT queue_rate_limits_pkey PRIMARY KEY (task_type, queue_key);

ALTER TABLE ONLY asyncflow.rate_limits
    ADD CONSTRAINT rate_limits_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.refinery_schema_history
    ADD CONSTRAINT refinery_schema_history_pkey PRIMARY KEY (version);

ALTER TABLE ONLY asyncflow.run_days
    ADD CONSTRAINT run_days_pkey PRIMARY KEY (day);

ALTER TABLE ONLY asyncflow.run_events
    ADD CONSTRAINT run_events_pkey PRIMARY KEY (event_id, day);

ALTER TABLE ONLY asyncflow.run_idempotency_keys
    ADD CONSTRAINT run_idempotency_keys_pkey PRIMARY KEY (pipeline, idempotency_key);

ALTER TABLE ONLY asyncflow.run_segments
    ADD CONSTRAINT run_segments_pkey PRIMARY KEY (segment_id, day);

ALTER TABLE ONLY asyncflow.run_traces
    ADD CONSTRAINT run_traces_pkey PRIMARY KEY (trace_id, day);

ALTER TABLE ONLY asyncflow.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (run_id, day);

ALTER TABLE ONLY asyncflow.schedule_ticks
    ADD CONSTRAINT schedule_ticks_pkey PRIMARY KEY (schedule, tick);

ALTER TABLE ONLY asyncflow.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (name);

ALTER TABLE ONLY asyncflow.shards
    ADD CONSTRAINT shards_pkey PRIMARY KEY (task_type, shard);

ALTER TABLE ONLY asyncflow.sql_api
    ADD CONSTRAINT sql_api_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY asyncflow.stage_times
    ADD CONSTRAINT stage_times_pkey PRIMARY KEY (task_type, stage, slot);

ALTER TABLE ONLY asyncflow.stats_last
    ADD CONSTRAINT stats_last_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.stats_points
    ADD CONSTRAINT stats_points_pkey PRIMARY KEY (task_type, resolution, slot);

ALTER TABLE ONLY asyncflow.task_types
    ADD CONSTRAINT task_types_pkey PRIMARY KEY (task_type);

ALTER TABLE ONLY asyncflow.task_waiters
    ADD CONSTRAINT task_waiters_pkey PRIMARY KEY (task_type, shard, id);

ALTER TABLE ONLY asyncflow.type_counters
    ADD CONSTRAINT type_counters_pkey PRIMARY KEY (task_type, slot);

ALTER TABLE ONLY asyncflow.unique_keys
    ADD CONSTRAINT unique_keys_pkey PRIMARY KEY (task_type, unique_key);

ALTER TABLE ONLY asyncflow.waits
    ADD CONSTRAINT waits_pkey PRIMARY KEY (task_type, shard, id);

ALTER TABLE ONLY asyncflow.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (id);

CREATE INDEX callbacks_due ON ONLY asyncflow.callbacks USING btree (next_attempt_at) WHERE (status = 'pending'::text);

CREATE INDEX callbacks_run ON ONLY asyncflow.callbacks USING btree (run_id);

CREATE INDEX debounce_keys_start_at ON asyncflow.debounce_keys USING btree (start_at);

CREATE INDEX events_key_sent_at ON asyncflow.events USING btree (event_key, sent_at);

CREATE INDEX idempotency_keys_shard ON asyncflow.idempotency_keys USING btree (task_type, shard);

CREATE UNIQUE INDEX pipelines_one_active ON asyncflow.pipelines USING btree (name) WHERE (status = 'active'::text);

CREATE INDEX run_events_deadline ON ONLY asyncflow.run_events USING btree (deadline) WHERE (status = ANY (ARRAY['pending'::text, 'running'::text, 'external'::text]));

CREATE INDEX run_events_run ON ONLY asyncflow.run_events USING btree (run_id);

CREATE INDEX run_idempotency_keys_day ON asyncflow.run_idempotency_keys USING btree (day);

CREATE INDEX run_segments_deadline ON ONLY asyncflow.run_segments USING btree (deadline) WHERE (status = ANY (ARRAY['pending'::text, 'running'::text]));

CREATE INDEX run_segments_event ON ONLY asyncflow.run_segments USING btree (event_id, n);

CREATE INDEX run_traces_run ON ONLY asyncflow.run_traces USING btree (run_id, created_at);

CREATE INDEX runs_notify_key ON ONLY asyncflow.runs USING btree (notify_key) WHERE (notify_key IS NOT NULL);

CREATE INDEX runs_open ON ONLY asyncflow.runs USING btree (status, deadline) WHERE (status = ANY (ARRAY['scheduled'::asyncflow.run_status, 'running'::asyncflow.run_status]));

CREATE INDEX runs_pipeline ON ONLY asyncflow.runs USING btree (pipeline, created_at);

CREATE INDEX runs_scheduled ON ONLY asyncflow.runs USING btree (run_at) WHERE (status = 'scheduled'::asyncflow.run_status);

CREATE INDEX tasks_parent_id ON ONLY asyncflow.tasks USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX unique_keys_expires ON asyncflow.unique_keys USING btree (expires_at) WHERE (expires_at IS NOT NULL);

CREATE INDEX waits_event_key ON asyncflow.waits USING btree (event_key);

CREATE INDEX waits_until ON asyncflow.waits USING btree (until);

CREATE TRIGGER tg_config__enqueue_info AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON asyncflow.config FOR EACH STATEMENT EXECUTE FUNCTION asyncflow.tg_enqueue_info();

CREATE TRIGGER tg_joins__ended AFTER UPDATE OF ended ON asyncflow.joins FOR EACH ROW WHEN (((new.children IS NOT NULL) AND (new.ended >= new.total) AND (old.ended < old.total))) EXECUTE FUNCTION asyncflow.tg_joins__ended();

CREATE TRIGGER tg_positions__enqueue_info AFTER INSERT OR UPDATE OF end_pos ON asyncflow.positions FOR EACH ROW EXECUTE FUNCTION asyncflow.tg_enqueue_info();

CREATE TRIGGER tg_positions__enqueue_info_gone AFTER DELETE OR TRUNCATE ON asyncflow.positions FOR EACH STATEMENT EXECUTE FUNCTION asyncflow.tg_enqueue_info();

CREATE TRIGGER tg_task_types__enqueue_info AFTER INSERT OR UPDATE ON asyncflow.task_types FOR EACH ROW EXECUTE FUNCTION asyncflow.tg_enqueue_info();

CREATE TRIGGER tg_task_types__fair_queues AFTER UPDATE OF fair_queues ON asyncflow.task_types FOR EACH ROW WHEN ((old.fair_queues IS DISTINCT FROM new.fair_queues)) EXECUTE FUNCTION asyncflow.tg_task_types__functions();

CREATE TRIGGER tg_task_types__functions AFTER INSERT ON asyncflow.task_types FOR EACH ROW EXECUTE FUNCTION asyncflow.tg_task_types__functions();

CREATE TRIGGER tg_task_types__resumed AFTER UPDATE OF paused ON asyncflow.task_types FOR EACH ROW WHEN ((old.paused AND (NOT new.paused))) EXECUTE FUNCTION asyncflow.tg_task_types__resumed();

ALTER TABLE ONLY asyncflow.debounce_keys
    ADD CONSTRAINT debounce_keys_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.enqueue_info
    ADD CONSTRAINT enqueue_info_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.idempotency_keys
    ADD CONSTRAINT idempotency_keys_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.positions
    ADD CONSTRAINT positions_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.queue_cursors
    ADD CONSTRAINT queue_cursors_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.queue_limits
    ADD CONSTRAINT queue_limits_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.queue_rate_limits
    ADD CONSTRAINT queue_rate_limits_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.rate_limits
    ADD CONSTRAINT rate_limits_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.schedule_ticks
    ADD CONSTRAINT schedule_ticks_schedule_fkey FOREIGN KEY (schedule) REFERENCES asyncflow.schedules(name) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.shards
    ADD CONSTRAINT shards_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

ALTER TABLE ONLY asyncflow.unique_keys
    ADD CONSTRAINT unique_keys_task_type_fkey FOREIGN KEY (task_type) REFERENCES asyncflow.task_types(task_type) ON DELETE CASCADE;

GRANT USAGE ON SCHEMA asyncflow TO asyncflow_client;
GRANT USAGE ON SCHEMA asyncflow TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.advance_begin_pos(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.append_log(p_log jsonb, p_entry jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.append_logs(p_log jsonb, p_entries jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.bulk_change_tasks(p_action text, p_filter jsonb, p_dry_run boolean, p_limit integer, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.bulk_change_tasks(p_action text, p_filter jsonb, p_dry_run boolean, p_limit integer, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.can_maintain(OUT ok boolean, OUT denied text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.can_maintain(OUT ok boolean, OUT denied text[]) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.cancel_children(p_task_type text, p_shard integer, p_id bigint, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.cancel_run(run_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.cancel_run(run_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.cancel_task(task_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.check_context(p_context jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_json(p_value jsonb, p_field text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_new_task(p_context jsonb, p_priority integer, p_run_at timestamp with time zone, p_stage text, p_user_id text, p_queue_key text, p_traceparent text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_new_type_name(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_now(p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_report_arrays(p_task_ids text[], p_claim_seqs bigint[], p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[], p_delays double precision[], p_progress jsonb[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_runs(p_now timestamp with time zone, p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_settings(p_settings jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_task_exists(p_task_type text, p_shard integer, p_id bigint, p_task_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.check_type_name(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.checkpoint_task(task_id text, claim_seq bigint, context jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.checkpoint_task(task_id text, claim_seq bigint, context jsonb) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.child_result_max_bytes() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.children_results_max_bytes() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.claim_callbacks(p_owner text, p_limit integer, p_lease integer, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.claim_tasks(p_task_type text, p_owner text, p_limit integer, p_now timestamp with time zone) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.commit_durably() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.compile_pipeline(p_name text, p_definition jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.complete_node(run_id text, node text, result jsonb, error text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.complete_node(run_id text, node text, result jsonb, error text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.count_by_status(p_task_type text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.count_by_status(p_task_type text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.count_child_ends(p_parent_ids text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_shard(p_task_type text, p_shard integer, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_task(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone, queue_key text, unique_key text, unique_for integer, traceparent text, debounce_key text, debounce_for interval) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.create_task(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone, queue_key text, unique_key text, unique_for integer, traceparent text, debounce_key text, debounce_for interval) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.create_task_debounced(p_task_type text, p_context jsonb, p_priority integer, p_run_at timestamp with time zone, p_stage text, p_user_id text, p_now timestamp with time zone, p_queue_key text, p_traceparent text, p_debounce_key text, p_debounce_for interval) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_task_general(task_type text, context jsonb, priority integer, run_at timestamp with time zone, stage text, idempotency_key text, user_id text, p_now timestamp with time zone, queue_key text, unique_key text, unique_for integer, traceparent text, debounce_key text, debounce_for interval) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.create_tasks(task_type text, tasks jsonb, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.create_type_functions(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.current_leader(p_within_seconds double precision, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.current_leader(p_within_seconds double precision, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.drop_expired_events(p_now timestamp with time zone, p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.drop_expired_runs(p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.drop_expired_unique_keys(p_now timestamp with time zone, p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.end_join(p_task_type text, p_shard integer, p_id bigint, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.end_waits(p_task_type text, p_shards integer[], p_ids bigint[], p_wakes jsonb[], p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.enqueue_task_type(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.ensure_run_day(p_day date) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.event_key_problem(p_key text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.event_payload_max_bytes() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.expire_waits(p_now timestamp with time zone, p_limit integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.explain_task(task_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.explain_task(task_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.fail_unreadable(p_task_type text, p_shard integer, p_id bigint, p_why text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.filter_tasks(p_filter jsonb, p_statuses asyncflow.task_status[], p_plain_only boolean, p_after text, p_limit integer, p_newest boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.find_tasks(p_filter jsonb, p_after text, p_limit integer, p_order text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.find_tasks(p_filter jsonb, p_after text, p_limit integer, p_order text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.fold_status_deltas() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.format_task_id(p_task_type text, p_shard integer, p_id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.get_pipeline(name text, version integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.get_pipeline(name text, version integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.get_run(run_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.get_run(run_id text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.get_task(task_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.get_task(task_id text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.graph_index(p_ends integer[], p_nodes integer, OUT edges integer[], OUT at integer[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.graph_reach(p_root integer, p_nodes integer, p_at integer[], p_edges integer[], p_far integer[], p_live boolean[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.heartbeat_worker(p_id text, p_host text, p_pid integer, p_types text[], p_in_flight integer, p_started_at timestamp with time zone, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.heartbeat_worker(p_id text, p_host text, p_pid integer, p_types text[], p_in_flight integer, p_started_at timestamp with time zone, p_now timestamp with time zone) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.held_tasks(p_task_type text, p_owner text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.held_tasks(p_task_type text, p_owner text) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.insert_tasks(p_task_type text, p_tasks jsonb, p_now timestamp with time zone, p_single boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.is_integral(p_value jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.is_jsonpath(p_text text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.is_timestamptz(p_text text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.join_counts(p_parent_ids text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.json_ok(p_value jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.json_out(p_doc jsonb, p_fields text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.json_problem(p_value jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.leave_leadership(p_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.list_pipelines() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_pipelines() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.list_runs(pipeline text, status text, p_limit integer, p_before text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_runs(pipeline text, status text, p_limit integer, p_before text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.list_schedules() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_schedules() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.list_task_types() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_task_types() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.list_tasks(p_task_type text, p_status asyncflow.task_status, p_stage text, p_user_id text, p_after text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_tasks(p_task_type text, p_status asyncflow.task_status, p_stage text, p_user_id text, p_after text, p_limit integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.list_workers(p_within_seconds double precision, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.list_workers(p_within_seconds double precision, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.maintenance_due(p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.maintenance_functions() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.maintenance_functions() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.match_waits(p_task_type text, p_task_ids text[], p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.max_context_bytes() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.max_context_bytes() TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.missing_grants(p_role text, p_task_types text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.missing_grants(p_role text, p_task_types text[]) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.next_claim_seq(p_claim_seq bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.next_due(p_task_type text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.next_due(p_task_type text) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.note_leader(p_id text, p_host text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.note_schedule(p_name text, p_next_tick timestamp with time zone, p_error text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.notify_waiters(p_task_type text, p_task_ids text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.notify_waiters(p_task_type text, p_shards integer[], p_ids bigint[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.now_ok(p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.parse_task_id(p_task_id text, OUT task_type text, OUT shard integer, OUT id bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.pause_schedule(name text, p_paused boolean, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.pause_schedule(name text, p_paused boolean, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.pipeline_error(p_message text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.pipeline_json(p asyncflow.pipelines) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.plan_step_limit() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.plan_steps(p_plan jsonb, OUT plan jsonb, OUT path text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.progress_too_large(p_progress jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.prune_rate_buckets(p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.prune_workers(p_stale_seconds double precision, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.put_pipeline(name text, definition jsonb, status text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.put_pipeline(name text, definition jsonb, status text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.queue_depth_rows() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.queue_depth_rows() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.queue_keys(p_task_type text, p_after text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.queue_keys(p_task_type text, p_after text, p_limit integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.queue_rate_allowance(p_type asyncflow.task_types, p_keys text[], p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.queue_rate_spend(p_task_type text, p_keys text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.raise_error(p_code text, p_message text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.rate_allowance(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.rate_spend(p_task_type text, p_started integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.record_callback(p_callback_id text, p_attempt integer, p_http_status integer, p_error text, p_cost_ms integer, p_give_up boolean, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.refresh_enqueue_info(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.register_task_type(task_type text, settings jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.register_task_type(task_type text, settings jsonb) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.release_schedule_tick(p_name text, p_tick timestamp with time zone, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.remove_schedule(name text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.remove_schedule(name text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.remove_worker(p_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.remove_worker(p_id text) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.render_template(p_name text, p_task_type text, p_variant text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.report_task_arrays(p_owner text, p_task_ids text[], p_claim_seqs bigint[], p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[], p_delays double precision[], p_now timestamp with time zone, p_progress jsonb[]) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.report_task_arrays(p_owner text, p_task_ids text[], p_claim_seqs bigint[], p_outcomes text[], p_stages text[], p_contexts jsonb[], p_results jsonb[], p_errors text[], p_retries boolean[], p_delays double precision[], p_now timestamp with time zone, p_progress jsonb[]) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.report_tasks(p_owner text, p_reports jsonb, p_now timestamp with time zone) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.rescue_expired(p_now timestamp with time zone, p_limit integer, p_skip_owners text[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.retry_backoff(p_attempt integer, p_max integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.retry_node(run_id text, node text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.retry_node(run_id text, node text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.retry_run(run_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.retry_run(run_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.retry_task(task_id text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.retry_wait(p_attempt integer, p_max integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.roll_shard(p_task_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.run_day(p_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.run_json(r asyncflow.runs) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.sample_stats(p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.schedule_json(s asyncflow.schedules) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.schema_state() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.schema_state() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.send_event(event_key text, payload jsonb, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.send_event(event_key text, payload jsonb, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.set_pipeline_status(name text, version integer, status text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.set_pipeline_status(name text, version integer, status text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.set_progress(p_task_id text, p_claim_seq bigint, p_progress jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.set_progress(p_task_id text, p_claim_seq bigint, p_progress jsonb) TO asyncflow_worker;

REVOKE ALL ON FUNCTION asyncflow.set_queue_indexes(p_task_type text, p_on boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.set_queue_limit(p_task_type text, p_queue_key text, p_concurrency integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.set_queue_limit(p_task_type text, p_queue_key text, p_concurrency integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.set_queue_rate_limit(p_task_type text, p_queue_key text, p_max_starts integer, p_period double precision, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.set_queue_rate_limit(p_task_type text, p_queue_key text, p_max_starts integer, p_period double precision, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.set_rate_limit(task_type text, max_starts integer, period double precision, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.set_rate_limit(task_type text, max_starts integer, period double precision, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.set_schedule(name text, cron text, spec jsonb, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.set_schedule(name text, cron text, spec jsonb, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.shard_is_live(p_task_type text, p_shard integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.shard_positions(p_task_type text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.shard_positions(p_task_type text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.shorten(p_text text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.spawn_children(p_task_type text, p_task_ids text[], p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.spawn_max_children() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.spawn_problem(p_spawn jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.stage_ok(p_stage text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.stage_time_bounds() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.stage_time_totals() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.stage_time_totals() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.start_run(pipeline text, input jsonb, notify_url text, run_at timestamp with time zone, notify_key text, version integer, p_now timestamp with time zone, idempotency_key text, traceparent text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.start_run(pipeline text, input jsonb, notify_url text, run_at timestamp with time zone, notify_key text, version integer, p_now timestamp with time zone, idempotency_key text, traceparent text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.stats_history(p_task_type text, p_range text, p_now timestamp with time zone) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.stats_history(p_task_type text, p_range text, p_now timestamp with time zone) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.status_counts() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.status_counts() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.take_lead(p_id text, p_host text, p_lease_seconds double precision, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.task_children(task_id text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.task_children(task_id text, p_limit integer) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.task_counter_totals() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.task_counter_totals() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.task_created_here(p_task_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.task_created_here(p_task_id text) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.task_json(t asyncflow.tasks) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.task_log(t asyncflow.tasks) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.task_type_figures() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.task_type_figures() TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.task_type_json(p asyncflow.task_types) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_enqueue_info() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_joins__ended() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_task_types__functions() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_task_types__resumed() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.tg_tasks__workflow() FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.traceparent_ok(p_traceparent text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.uncount_child_end(p_parent_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.unreadable(p_field text, p_value jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wait_for_hold(p_task_type text, p_shard integer, p_id bigint, p_claim_seq bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wake(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.watch_task(task_id text, p_seconds double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.watch_task(task_id text, p_seconds double precision) TO asyncflow_client;

REVOKE ALL ON FUNCTION asyncflow.wf_activate(p_run asyncflow.runs, p_node text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_arrive(p_run asyncflow.runs, p_node text, p_live boolean, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_begin_run(p_run_id text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_cancel_task(p_task_id text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_close_event_work(p_day date, p_event_id text, p_task_id text, p_child_run text, p_node_type text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_complete_event(p_event_id text, p_result jsonb, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_create_tasks(p_node jsonb, p_contexts jsonb, p_refs text[], p_traceparent text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_data(p_run asyncflow.runs) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_end_event(p_event_id text, p_status text, p_result jsonb, p_error text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_enqueue_callback(p_run asyncflow.runs, p_kind text, p_event_id text, p_url text, p_payload jsonb, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_fail_event(p_event_id text, p_error text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_finish_run(p_run_id text, p_status asyncflow.run_status, p_result jsonb, p_error text, p_now timestamp with time zone, p_notify boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_get_run(p_run_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_inputs(p_run asyncflow.runs, p_node jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_keep_place(p_old_task_id text, p_new_task_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_new_run(p_pipeline text, p_version integer, p_input jsonb, p_notify_url text, p_notify_key text, p_run_at timestamp with time zone, p_parent_event text, p_depth integer, p_attempt integer, p_retry_of text, p_now timestamp with time zone, p_traceparent text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_node_context(p_run asyncflow.runs, p_node text, p_inputs jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_node_timeout(p_run_id text, p_node text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_plan(p_run asyncflow.runs) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_rerun_event(p_run asyncflow.runs, p_event asyncflow.run_events, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_run_error(p_code text, p_message text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_run_for_update(p_run_id text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_start_segments(p_run asyncflow.runs, p_node text, p_def jsonb, p_inputs jsonb, p_ns integer[], p_items jsonb[], p_count integer, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_task_changed(p_ref text, p_task_id text, p_status asyncflow.task_status, p_result jsonb, p_error text, p_now timestamp with time zone) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.wf_watch_type(p_task_type text) FROM PUBLIC;

REVOKE ALL ON FUNCTION asyncflow.workflow_figures() FROM PUBLIC;
GRANT ALL ON FUNCTION asyncflow.workflow_figures() TO asyncflow_client;

GRANT SELECT ON TABLE asyncflow.queue_depth TO asyncflow_client;

