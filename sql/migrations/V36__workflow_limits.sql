-- V36: workflow limits, checked where they are passed.
--
-- 1. Steps in one call. The engine runs the nodes that complete at once (start, end, parallel,
--    router, a dynamic node with no items, a sub-pipeline whose run ends at once) in the call
--    that reached them, and skips the nodes of a branch a router does not take, by recursion:
--    wf_activate -> wf_complete_event -> wf_arrive -> wf_activate ..., and wf_arrive -> wf_arrive.
--    put_pipeline accepted any chain of them, and a long enough one ran out of PostgreSQL's stack
--    at run time (54001, max_stack_depth): start_run raised, a task's report failed the run with
--    an internal error, and (since V31) the checker failed a delayed run. Measured on PostgreSQL
--    15 (x86-64, max_stack_depth 2MB) from start_run, a task's report, complete_node, retry_node
--    and the checker: 209 parallel nodes in a row broke (211 with start and end), 201 routers or
--    empty dynamic nodes; a skipped node takes a little under a third of the stack of one that
--    completes, a sub-pipeline node about 5/3 of one plus what its run takes. So a plan counts
--    its steps (plan_steps): 3 for a node that may complete at once, 1 for a task or callback
--    node a router upstream may skip, 5 plus the child's steps for a sub-pipeline node; a task or
--    callback node no router can skip ends a chain (its task's end is a new call). The longest
--    chain's count is plan.steps: every measured breakage was at 609 steps or more.
--    compile_pipeline refuses more than 300 (plan_step_limit, half of it, for other versions and
--    platforms and for callers deeper in the stack) with AF010, naming the node the chain ends
--    at, so put_pipeline does.
--    A sub-pipeline node counts the version it would start when its parent is stored, and that
--    version can grow since. Each sub-pipeline node's plan entry keeps the steps its plan adds
--    around the child's (steps_around); before wf_activate starts a child run it adds those of
--    every run above to the child's steps, and past the limit the node fails, saying so, rather
--    than the call running out of stack.
-- 2. Sub-pipeline runs of one run. Their nesting was capped (8 levels) but not their number: a
--    run starts one child per sub-pipeline node, a pipeline may have 500 of them, and so may each
--    child's: one start_run could start up to 500^8 runs, all in the one call when the children
--    are instant. The root run of a tree now counts the sub-pipeline runs started anywhere in it
--    (runs.sub_runs; a retried node's new child counts too), and the node that would start the
--    1001st fails, saying so, as the one that would nest a 9th level does.
--
-- Plans stored before V36 are given their steps and are not refused, but the check before a
-- sub-pipeline's child run applies to them too: a node whose steps with the runs above pass 300
-- fails, where it may have fitted the stack before (breakage starts at about 609). Other runs of
-- such a plan past the stack fail as before. compile_pipeline and wf_activate are replaced whole
-- (the migration convention); only the parts marked V36 changed.

alter table asyncflow.runs add column sub_runs integer not null default 0;
comment on column asyncflow.runs.sub_runs is
  'on a root run: the sub-pipeline runs started in its tree, at most 1000 (V36)';

-- The most steps one call may run through a plan (see plan_steps).
create function asyncflow.plan_step_limit() returns integer
language sql immutable parallel safe as $$ select 300 $$;

-- A plan with its steps: the most one call can run through it, by the recursion of wf_activate,
-- wf_complete_event and wf_arrive (plan.steps), and for each sub-pipeline node the steps its
-- pipeline adds around the child's own (steps_around: the longest chain to it, its own 5, the
-- longest chain on after it). A node that may complete at once counts 3; a task or callback node
-- counts 1 (it may be skipped, when a router is upstream), and without a router upstream it cuts
-- the chain: what follows it runs in the call that ends its task. A sub-pipeline node counts 5
-- plus the steps of the version it would start now (none when there is none: wf_activate checks
-- the version it does start). path: the nodes of the longest chain.
create function asyncflow.plan_steps(p_plan jsonb, out plan jsonb, out path text[])
language plpgsql stable as $$
declare
  v_names text[] := array(select jsonb_array_elements_text(p_plan -> 'order'));
  v_n integer := cardinality(v_names);
  v_types text[];
  v_weight integer[];
  v_fi integer[];
  v_ti integer[];
  v_out integer[];
  v_out_at integer[];
  v_in integer[];
  v_in_at integer[];
  v_count integer[];
  v_topo integer[];
  v_head integer := 1;
  v_k integer;
  v_j integer;
  v_i integer;
  -- per node: may a router's choice skip it; does the call go on from it; the steps of the
  -- longest chain before it, and through it; the node before it on that chain; the steps of the
  -- longest chain after it
  v_skippable boolean[];
  v_carries boolean[];
  v_before integer[];
  v_through integer[];
  v_prev integer[];
  v_after integer[];
  v_last integer := 1;
  v_around jsonb := '{}';
begin
  select array_agg(d ->> 'type' order by k),
    array_agg(case when d ->> 'type' in ('task', 'callback') then 1
      when d ->> 'type' = 'pipeline' then 5 + coalesce((select (p.plan ->> 'steps')::integer from asyncflow.pipelines p
        where p.name = d ->> 'pipeline' and case when d ->> 'version' is null then p.status = 'active'
          else p.version = (d ->> 'version')::numeric end), 0)
      else 3 end order by k)
  into v_types, v_weight
  from unnest(v_names) with ordinality u(n, k), jsonb_extract_path(p_plan, 'nodes', n) d;
  select coalesce(array_agg(f.k::integer order by f.k, e.o), '{}'), coalesce(array_agg(t.k::integer order by f.k, e.o), '{}')
  into v_fi, v_ti
  from unnest(v_names) with ordinality f(n, k)
  cross join lateral jsonb_array_elements(p_plan -> 'nodes' -> f.n -> 'out') with ordinality e(edge, o)
  join unnest(v_names) with ordinality t(n, k) on t.n = e.edge ->> 'to';
  select * into v_out, v_out_at from asyncflow.graph_index(v_fi, v_n);
  select * into v_in, v_in_at from asyncflow.graph_index(v_ti, v_n);

  -- topological order (Kahn; the plan has no cycle)
  v_count := array(select v_in_at[k + 1] - v_in_at[k] from generate_series(1, v_n) k);
  v_topo := array(select k from generate_series(1, v_n) k where v_count[k] = 0);
  while v_head <= cardinality(v_topo) loop
    v_k := v_topo[v_head];
    v_head := v_head + 1;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      v_count[v_i] := v_count[v_i] - 1;
      if v_count[v_i] = 0 then
        v_topo := v_topo || v_i;
      end if;
    end loop;
  end loop;

  v_skippable := array_fill(false, array[v_n]);
  v_carries := array_fill(false, array[v_n]);
  v_before := array_fill(0, array[v_n]);
  v_through := array_fill(0, array[v_n]);
  v_prev := array_fill(null::integer, array[v_n]);
  v_after := array_fill(0, array[v_n]);
  foreach v_k in array v_topo loop
    v_through[v_k] := v_before[v_k] + v_weight[v_k];
    v_carries[v_k] := v_types[v_k] not in ('task', 'callback') or v_skippable[v_k];
    if v_through[v_k] > v_through[v_last] then
      v_last := v_k;
    end if;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      v_skippable[v_i] := v_skippable[v_i] or v_skippable[v_k] or v_types[v_k] = 'router';
      if v_carries[v_k] and v_through[v_k] > v_before[v_i] then
        v_before[v_i] := v_through[v_k];
        v_prev[v_i] := v_k;
      end if;
    end loop;
  end loop;
  for v_head in reverse cardinality(v_topo) .. 1 loop
    v_k := v_topo[v_head];
    if v_carries[v_k] then
      for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
        v_i := v_ti[v_out[v_j]];
        v_after[v_k] := greatest(v_after[v_k], v_weight[v_i] + v_after[v_i]);
      end loop;
    end if;
    if v_types[v_k] = 'pipeline' then
      v_around := v_around || jsonb_build_object(v_names[v_k], v_before[v_k] + 5 + v_after[v_k]);
    end if;
  end loop;

  path := '{}';
  v_k := v_last;
  while v_k is not null loop
    path := v_names[v_k] || path;
    v_k := v_prev[v_k];
  end loop;
  plan := p_plan || jsonb_build_object('steps', v_through[v_last],
    'nodes', (select jsonb_object_agg(x.n, case when v_around ? x.n
      then x.d || jsonb_build_object('steps_around', v_around -> x.n) else x.d end)
      from jsonb_each(p_plan -> 'nodes') x(n, d)));
end
$$;

CREATE OR REPLACE FUNCTION asyncflow.compile_pipeline(p_name text, p_definition jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    AS $_$
declare
  v_node jsonb;
  v_edge jsonb;
  v_name text;
  v_type text;
  v_key text;
  v_nodes jsonb;
  v_defs jsonb[] := '{}';
  v_types text[] := '{}';
  v_order text[] := '{}';
  v_start text;
  v_end text;
  v_allowed text[];
  -- nodes by number (their position in v_order, v_defs and v_types)
  v_n integer;
  v_number jsonb := '{}';
  -- edges in definition order, by node name and by node number
  v_e integer := 0;
  v_from text[] := '{}';
  v_to text[] := '{}';
  v_when text[] := '{}';
  v_fi integer[] := '{}';
  v_ti integer[] := '{}';
  v_live boolean[];
  v_dup integer;
  v_f text;
  v_t text;
  v_w text;
  -- edges grouped by node (graph_index)
  v_out integer[];
  v_out_at integer[];
  v_in integer[];
  v_in_at integer[];
  v_count integer[];
  v_seen boolean[];
  v_queue integer[];
  v_head integer;
  v_k integer;
  v_j integer;
  v_i integer;
  v_cycle text[];
  v_pruned jsonb := '[]';
  v_has_default boolean;
  v_plan jsonb;
  v_path text[];
begin
  -- Field types the casts below rely on (V20).
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

  if p_definition is null or jsonb_typeof(p_definition) <> 'object' then
    perform asyncflow.pipeline_error('a pipeline definition must be a JSON object with nodes and edges');
  end if;
  select k into v_key from jsonb_object_keys(p_definition) k
  where k not in ('name', 'description', 'timeout', 'retries', 'nodes', 'edges') limit 1;
  if found then
    perform asyncflow.pipeline_error(format('unknown field %L (known: name, description, timeout, retries, nodes, edges)', v_key));
  end if;
  if p_definition ? 'name' and p_definition ->> 'name' is distinct from p_name then
    perform asyncflow.pipeline_error(format('the definition names pipeline %s, not %L', p_definition -> 'name', p_name));
  end if;
  if jsonb_typeof(p_definition -> 'timeout') not in ('number', 'null')
    or (p_definition ->> 'timeout')::numeric not between 1 and 31536000 then
    perform asyncflow.pipeline_error(format('timeout must be seconds between 1 and 31536000, got %s', p_definition -> 'timeout'));
  end if;
  if jsonb_typeof(p_definition -> 'retries') not in ('number', 'null')
    or (p_definition ->> 'retries')::numeric not between 0 and 100 then
    perform asyncflow.pipeline_error(format('retries must be an integer between 0 and 100, got %s', p_definition -> 'retries'));
  end if;
  if jsonb_typeof(p_definition -> 'nodes') is distinct from 'array' or jsonb_array_length(p_definition -> 'nodes') = 0 then
    perform asyncflow.pipeline_error('nodes must be a non-empty array of node objects');
  end if;
  if jsonb_array_length(p_definition -> 'nodes') > 500 then
    perform asyncflow.pipeline_error('a pipeline has at most 500 nodes');
  end if;
  if jsonb_typeof(p_definition -> 'edges') is distinct from 'array' then
    perform asyncflow.pipeline_error('edges must be an array of {"from", "to", "when"} objects or [from, to] pairs');
  end if;
  if jsonb_array_length(p_definition -> 'edges') > 5000 then
    perform asyncflow.pipeline_error('a pipeline has at most 5000 edges');
  end if;

  -- Nodes: names, types, fields.
  for v_node in select e from jsonb_array_elements(p_definition -> 'nodes') e loop
    if jsonb_typeof(v_node) <> 'object' or jsonb_typeof(v_node -> 'name') is distinct from 'string' then
      perform asyncflow.pipeline_error(format('every node must be an object with a name, got %s', v_node));
    end if;
    v_name := v_node ->> 'name';
    if v_name !~ '^[a-z][a-z0-9_]{0,39}$' then
      perform asyncflow.pipeline_error(format('node %L: a node name must match ^[a-z][a-z0-9_]{0,39}$', v_name));
    end if;
    if v_number ? v_name then
      perform asyncflow.pipeline_error(format('node %L: the name is used twice', v_name));
    end if;
    v_type := v_node ->> 'type';
    v_allowed := case v_type
      when 'start' then '{}'::text[]
      when 'end' then '{}'
      when 'parallel' then '{}'
      when 'router' then '{}'
      when 'task' then '{function,stage,priority,async,timeout,timeout_retries}'
      when 'dynamic' then '{function,stage,priority,items,max_segments,timeout,timeout_retries}'
      when 'pipeline' then '{pipeline,version,timeout}'
      when 'callback' then '{url}'
    end;
    if v_allowed is null then
      perform asyncflow.pipeline_error(format(
        'node %L: type must be one of start, end, task, dynamic, router, parallel, pipeline, callback, got %s',
        v_name, coalesce((v_node -> 'type')::text, 'nothing')));
    end if;
    select k into v_key from jsonb_object_keys(v_node) k
    where k not in ('name', 'type', 'description') and k <> all (v_allowed) limit 1;
    if found then
      perform asyncflow.pipeline_error(format('node %L: unknown field %L for a %s node', v_name, v_key, v_type));
    end if;
    if v_type in ('task', 'dynamic') then
      if v_node ? 'function' then
        if jsonb_typeof(v_node -> 'function') <> 'string'
          or not exists (select 1 from asyncflow.task_types y where y.task_type = v_node ->> 'function') then
          perform asyncflow.pipeline_error(format('node %L: unknown function %s (register its task type first)',
            v_name, v_node -> 'function'));
        end if;
      elsif v_type = 'dynamic' or not coalesce((v_node ->> 'async')::boolean, false) then
        perform asyncflow.pipeline_error(format('node %L: a %s node needs a function', v_name, v_type));
      end if;
      if jsonb_typeof(v_node -> 'stage') not in ('string', 'null') or (v_node ->> 'stage') !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
        perform asyncflow.pipeline_error(format('node %L: stage must match ^[A-Za-z0-9_.:/-]{1,64}$', v_name));
      end if;
      if jsonb_typeof(v_node -> 'priority') not in ('number', 'null')
        or (v_node ->> 'priority')::numeric not between 0 and 31104000 then
        perform asyncflow.pipeline_error(format('node %L: priority must be between 0 and 31104000', v_name));
      end if;
      if jsonb_typeof(v_node -> 'async') not in ('boolean', 'null') then
        perform asyncflow.pipeline_error(format('node %L: async must be true or false', v_name));
      end if;
      if jsonb_typeof(v_node -> 'timeout_retries') not in ('number', 'null')
        or (v_node ->> 'timeout_retries')::numeric not between 0 and 100 then
        perform asyncflow.pipeline_error(format('node %L: timeout_retries must be between 0 and 100', v_name));
      end if;
    end if;
    if jsonb_typeof(v_node -> 'timeout') not in ('number', 'null')
      or (v_node ->> 'timeout')::numeric not between 1 and 31536000 then
      perform asyncflow.pipeline_error(format('node %L: timeout must be seconds between 1 and 31536000', v_name));
    end if;
    if v_type = 'dynamic' then
      if jsonb_typeof(v_node -> 'items') is distinct from 'string' or not asyncflow.is_jsonpath(v_node ->> 'items') then
        perform asyncflow.pipeline_error(format('node %L: items must be a jsonpath such as "$.nodes.split.segments", got %s',
          v_name, coalesce((v_node -> 'items')::text, 'nothing')));
      end if;
      if jsonb_typeof(v_node -> 'max_segments') not in ('number', 'null')
        or (v_node ->> 'max_segments')::numeric not between 1 and 100000 then
        perform asyncflow.pipeline_error(format('node %L: max_segments must be between 1 and 100000', v_name));
      end if;
    end if;
    if v_type = 'pipeline' then
      if jsonb_typeof(v_node -> 'pipeline') is distinct from 'string' then
        perform asyncflow.pipeline_error(format('node %L: a pipeline node needs the name of a pipeline', v_name));
      end if;
      if v_node ->> 'pipeline' = p_name then
        perform asyncflow.pipeline_error(format('node %L: a pipeline cannot run itself', v_name));
      end if;
      if not exists (select 1 from asyncflow.pipelines p where p.name = v_node ->> 'pipeline'
          and p.status <> 'retired' and (v_node -> 'version' is null or p.version = (v_node ->> 'version')::numeric)) then
        perform asyncflow.pipeline_error(format('node %L: unknown pipeline %s%s', v_name, v_node -> 'pipeline',
          coalesce(' version ' || (v_node ->> 'version'), '')));
      end if;
    end if;
    if v_type = 'callback' and v_node ? 'url' and (jsonb_typeof(v_node -> 'url') <> 'string'
      or (v_node ->> 'url') !~ '^https?://[^\s]+$' or length(v_node ->> 'url') > 2048) then
      perform asyncflow.pipeline_error(format('node %L: url must be an http(s) URL of at most 2048 characters', v_name));
    end if;
    if v_type = 'start' then
      if v_start is not null then
        perform asyncflow.pipeline_error(format('node %L: a pipeline has exactly one start node (%L is one)', v_name, v_start));
      end if;
      v_start := v_name;
    elsif v_type = 'end' then
      if v_end is not null then
        perform asyncflow.pipeline_error(format('node %L: a pipeline has exactly one end node (%L is one)', v_name, v_end));
      end if;
      v_end := v_name;
    end if;
    v_order := v_order || v_name;
    v_defs := v_defs || (v_node - 'name');
    v_types := v_types || v_type;
    v_number := v_number || jsonb_build_object(v_name, cardinality(v_order));
  end loop;
  if v_start is null then
    perform asyncflow.pipeline_error('the pipeline has no start node');
  end if;
  if v_end is null then
    perform asyncflow.pipeline_error('the pipeline has no end node');
  end if;
  v_n := cardinality(v_order);

  -- Edges. The first edge listed twice is found in one pass; it is refused where the edge loop
  -- reaches it, after the checks of the edges before it and its own shape checks, as before.
  select min(k) into v_dup from (
    select k, row_number() over (partition by f, t order by k) as nth
    from (select k, case when jsonb_typeof(e) = 'array' then e ->> 0 else e ->> 'from' end as f,
            case when jsonb_typeof(e) = 'array' then e ->> 1 else e ->> 'to' end as t
          from jsonb_array_elements(p_definition -> 'edges') with ordinality x(e, k)) y
  ) z where nth > 1;
  for v_edge in select e from jsonb_array_elements(p_definition -> 'edges') e loop
    v_e := v_e + 1;
    if jsonb_typeof(v_edge) = 'array' and jsonb_array_length(v_edge) = 2 then
      v_edge := jsonb_build_object('from', v_edge -> 0, 'to', v_edge -> 1);
    end if;
    if jsonb_typeof(v_edge) <> 'object' or jsonb_typeof(v_edge -> 'from') is distinct from 'string'
      or jsonb_typeof(v_edge -> 'to') is distinct from 'string'
      or exists (select 1 from jsonb_object_keys(v_edge) k where k not in ('from', 'to', 'when')) then
      perform asyncflow.pipeline_error(format('edge %s: an edge is {"from", "to", "when"} or [from, to]', v_edge));
    end if;
    v_f := v_edge ->> 'from';
    v_t := v_edge ->> 'to';
    if not v_number ? v_f then
      perform asyncflow.pipeline_error(format('edge %s -> %s: unknown node %L', v_f, v_t, v_f));
    end if;
    if not v_number ? v_t then
      perform asyncflow.pipeline_error(format('edge %s -> %s: unknown node %L', v_f, v_t, v_t));
    end if;
    if v_f = v_t then
      perform asyncflow.pipeline_error(format('node %L: an edge from the node to itself is a cycle', v_f));
    end if;
    if v_t = v_start then
      perform asyncflow.pipeline_error(format('edge %s -> %s: node %L is the start node and has no in-edges', v_f, v_t, v_t));
    end if;
    if v_f = v_end then
      perform asyncflow.pipeline_error(format('edge %s -> %s: node %L is the end node and has no out-edges', v_f, v_t, v_f));
    end if;
    if v_e = v_dup then
      perform asyncflow.pipeline_error(format('edge %s -> %s: listed twice', v_f, v_t));
    end if;
    v_w := v_edge ->> 'when';
    if v_edge ? 'when' then
      if v_types[(v_number ->> v_f)::integer] <> 'router' then
        perform asyncflow.pipeline_error(format('edge %s -> %s: only a router''s edges have a condition (when)', v_f, v_t));
      end if;
      if jsonb_typeof(v_edge -> 'when') <> 'string' or not asyncflow.is_jsonpath(v_w) then
        perform asyncflow.pipeline_error(format('edge %s -> %s: when must be a jsonpath predicate such as "$.nodes.probe.duration_s > 60", got %s',
          v_f, v_t, v_edge -> 'when'));
      end if;
    end if;
    v_from := v_from || v_f;
    v_to := v_to || v_t;
    v_when := v_when || v_w;
    v_fi := v_fi || (v_number ->> v_f)::integer;
    v_ti := v_ti || (v_number ->> v_t)::integer;
  end loop;
  v_live := array_fill(true, array[v_e]);
  select * into v_out, v_out_at from asyncflow.graph_index(v_fi, v_n);
  select * into v_in, v_in_at from asyncflow.graph_index(v_ti, v_n);

  -- Cycles (Kahn): take away the nodes without an in-edge from a node still there, until none is
  -- left or every node left has one.
  v_count := array(select v_in_at[k + 1] - v_in_at[k] from generate_series(1, v_n) k);
  v_queue := array(select k from generate_series(1, v_n) k where v_count[k] = 0);
  v_head := 1;
  while v_head <= cardinality(v_queue) loop
    v_k := v_queue[v_head];
    v_head := v_head + 1;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      v_count[v_i] := v_count[v_i] - 1;
      if v_count[v_i] = 0 then
        v_queue := v_queue || v_i;
      end if;
    end loop;
  end loop;
  if cardinality(v_queue) < v_n then
    -- what is left is on a cycle or downstream of one; take away, the same way backwards, the
    -- nodes without an out-edge to a node left, and name one on the cycle itself
    v_seen := array(select v_count[k] > 0 from generate_series(1, v_n) k);
    v_count := array(select count(*) filter (where v_seen[k] and v_seen[v_ti[v_out[j]]])::integer
                     from generate_series(1, v_n) k
                     left join lateral generate_series(v_out_at[k], v_out_at[k + 1] - 1) j on true
                     group by k order by k);
    v_queue := array(select k from generate_series(1, v_n) k where v_seen[k] and v_count[k] = 0);
    v_head := 1;
    while v_head <= cardinality(v_queue) loop
      v_k := v_queue[v_head];
      v_head := v_head + 1;
      v_seen[v_k] := false;
      for v_j in v_in_at[v_k] .. v_in_at[v_k + 1] - 1 loop
        v_i := v_fi[v_in[v_j]];
        continue when not v_seen[v_i];
        v_count[v_i] := v_count[v_i] - 1;
        if v_count[v_i] = 0 then
          v_queue := v_queue || v_i;
        end if;
      end loop;
    end loop;
    v_cycle := array(select n from unnest(v_order) with ordinality u(n, k) where v_seen[k] order by k);
    perform asyncflow.pipeline_error(format('node %L: it is on a cycle (%s)', v_cycle[1], array_to_string(v_cycle, ', ')));
  end if;

  -- Every node is reachable from start ...
  v_seen := asyncflow.graph_reach((v_number ->> v_start)::integer, v_n, v_out_at, v_out, v_ti);
  select n into v_name from unnest(v_order) with ordinality u(n, k) where not v_seen[k] order by k limit 1;
  if found then
    perform asyncflow.pipeline_error(format('node %L: unreachable from the start node %L', v_name, v_start));
  end if;
  -- ... and has a path to the end.
  v_seen := asyncflow.graph_reach((v_number ->> v_end)::integer, v_n, v_in_at, v_in, v_fi);
  select n into v_name from unnest(v_order) with ordinality u(n, k) where not v_seen[k] order by k limit 1;
  if found then
    perform asyncflow.pipeline_error(format('node %L: no path from it to the end node %L', v_name, v_end));
  end if;

  -- Routers: at most one default edge; edges listed after it can never be taken (pruned).
  for v_k in 1 .. v_n loop
    continue when v_types[v_k] <> 'router';
    v_has_default := false;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_out[v_j];
      if v_has_default then
        v_live[v_i] := false;
        v_pruned := v_pruned || jsonb_build_object('edge', jsonb_build_array(v_from[v_i], v_to[v_i]),
          'why', 'listed after the router''s default edge: never taken');
      elsif v_when[v_i] is null then
        v_has_default := true;
      end if;
    end loop;
    if v_out_at[v_k + 1] = v_out_at[v_k] then
      perform asyncflow.pipeline_error(format('node %L: a router needs out-edges', v_order[v_k]));
    end if;
  end loop;
  -- Nodes left unreachable by the pruning are pruned too; the end must stay reachable.
  v_seen := asyncflow.graph_reach((v_number ->> v_start)::integer, v_n, v_out_at, v_out, v_ti, v_live);
  if not v_seen[(v_number ->> v_end)::integer] then
    perform asyncflow.pipeline_error(format('node %L: the end node can never be reached', v_end));
  end if;
  for v_k in 1 .. v_n loop
    if not v_seen[v_k] then
      v_pruned := v_pruned || jsonb_build_object('node', v_order[v_k], 'why', 'reachable only through pruned edges');
    end if;
  end loop;
  -- in and out of the nodes kept: their live edges from kept nodes, in definition order
  select jsonb_object_agg(x.k, x.v || jsonb_build_object('in', coalesce(i.edges, '[]'), 'out', coalesce(o.edges, '[]'),
    'in_degree', coalesce(jsonb_array_length(i.edges), 0))) into v_nodes
  from unnest(v_order, v_defs) with ordinality x(k, v, n)
  left join (select f, jsonb_agg(jsonb_build_object('to', t, 'when', w) order by e) as edges
             from unnest(v_from, v_to, v_when, v_fi) with ordinality u(f, t, w, fi, e)
             where v_live[e] and v_seen[fi] group by f) o on o.f = x.k
  left join (select t, jsonb_agg(to_jsonb(f) order by e) as edges
             from unnest(v_from, v_to, v_fi) with ordinality u(f, t, fi, e)
             where v_live[e] and v_seen[fi] group by t) i on i.t = x.k
  where v_seen[x.n];

  v_plan := jsonb_build_object('start', v_start, 'end', v_end,
    'timeout', coalesce((p_definition ->> 'timeout')::numeric, 86400),
    'retries', coalesce((p_definition ->> 'retries')::integer, 0),
    'nodes', v_nodes,
    'order', to_jsonb(array(select n from unnest(v_order) with ordinality u(n, k) where v_seen[k] order by k)),
    'pruned', v_pruned);

  -- (V36) The steps one call can run through the plan, within the stack (plan_steps).
  select * into v_plan, v_path from asyncflow.plan_steps(v_plan);
  if (v_plan ->> 'steps')::integer > asyncflow.plan_step_limit() then
    perform asyncflow.pipeline_error(format('node %L: reaching it can take %s steps in one call (%s), more than the limit '
      'of %s: the engine runs the nodes that complete at once (3 steps each; a sub-pipeline 5 plus its own) and skips a '
      'branch a router does not take (1 step a node) by recursion, within PostgreSQL''s stack',
      v_path[cardinality(v_path)], v_plan ->> 'steps',
      array_to_string(case when cardinality(v_path) > 7
        then v_path[1:3] || '...'::text || v_path[cardinality(v_path) - 2:] else v_path end, ' -> '),
      asyncflow.plan_step_limit()));
  end if;
  return v_plan;
end
$_$;

CREATE OR REPLACE FUNCTION asyncflow.wf_activate(p_run asyncflow.runs, p_node text, p_now timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
declare
  v_plan jsonb := asyncflow.wf_plan(p_run);
  v_def jsonb := v_plan -> 'nodes' -> p_node;
  v_type text := v_def ->> 'type';
  v_event_id text := p_run.run_id || '_' || p_node;
  v_inputs jsonb;
  v_data jsonb;
  v_items jsonb;
  v_edge jsonb;
  v_route text;
  v_ids text[];
  v_child text;
  v_url text;
  v_root asyncflow.runs;
  v_up asyncflow.runs;
  v_steps integer;
  v_child_pipe asyncflow.pipelines;
begin
  update asyncflow.run_events set status = 'running', exec_cnt = exec_cnt + 1, started_at = coalesce(started_at, p_now),
    deadline = p_now + make_interval(secs => (v_def ->> 'timeout')::double precision), task_id = null,
    child_run = null, cancelled_from = null, error = null, result = null, finished_at = null, total_cost_ms = null,
    updated_at = p_now
  where day = p_run.day and event_id = v_event_id;
  v_inputs := asyncflow.wf_inputs(p_run, v_def);
  begin
    case v_type
    when 'start' then
      perform asyncflow.wf_complete_event(v_event_id, p_run.input, p_now);
    when 'end', 'parallel' then
      perform asyncflow.wf_complete_event(v_event_id, v_inputs, p_now);
    when 'router' then
      v_data := asyncflow.wf_data(p_run);
      for v_edge in select e from jsonb_array_elements(v_def -> 'out') e loop
        if v_edge ->> 'when' is null or coalesce(jsonb_path_match(v_data, (v_edge ->> 'when')::jsonpath, silent => true), false) then
          v_route := v_edge ->> 'to';
          exit;
        end if;
      end loop;
      if v_route is null then
        perform asyncflow.wf_fail_event(v_event_id, 'no route matched and the router has no default edge', p_now);
      else
        perform asyncflow.wf_complete_event(v_event_id, jsonb_build_object('route', v_route), p_now);
      end if;
    when 'task' then
      if v_def ->> 'function' is null then
        update asyncflow.run_events set status = 'external', updated_at = p_now where day = p_run.day and event_id = v_event_id;
      else
        v_ids := asyncflow.wf_create_tasks(v_def, jsonb_build_array(asyncflow.wf_node_context(p_run, p_node, v_inputs)),
          array[v_event_id]);
        update asyncflow.run_events set status = 'pending', task_id = v_ids[1], updated_at = p_now
        where day = p_run.day and event_id = v_event_id;
      end if;
    when 'dynamic' then
      v_items := jsonb_path_query_first(asyncflow.wf_data(p_run), (v_def ->> 'items')::jsonpath, silent => true);
      if jsonb_typeof(v_items) is distinct from 'array' then
        perform asyncflow.wf_fail_event(v_event_id, format('items %s gave %s, not an array', v_def ->> 'items',
          coalesce(left(v_items::text, 200), 'nothing')), p_now);
      elsif jsonb_array_length(v_items) > coalesce((v_def ->> 'max_segments')::integer, 10000) then
        perform asyncflow.wf_fail_event(v_event_id, format('items gave %s segments, more than max_segments %s',
          jsonb_array_length(v_items), coalesce((v_def ->> 'max_segments')::integer, 10000)), p_now);
      elsif jsonb_array_length(v_items) = 0 then
        perform asyncflow.wf_complete_event(v_event_id, '[]'::jsonb, p_now);
      else
        perform asyncflow.wf_start_segments(p_run, p_node, v_def, v_inputs,
          array(select generate_series(0, jsonb_array_length(v_items) - 1)),
          array(select e from jsonb_array_elements(v_items) e), jsonb_array_length(v_items), p_now);
      end if;
    when 'pipeline' then
      -- (V36) the runs above, up to the root: the steps each adds around the sub-pipeline node
      -- that started the one below (plan_steps), and the root, which counts its tree's runs
      v_steps := coalesce((v_def ->> 'steps_around')::integer, 0);
      v_root := p_run;
      while v_root.parent_event is not null loop
        v_up := asyncflow.wf_get_run(split_part(v_root.parent_event, '_', 1));
        exit when v_up.run_id is null;
        v_steps := v_steps + coalesce((asyncflow.wf_plan(v_up) -> 'nodes'
          -> substr(v_root.parent_event, strpos(v_root.parent_event, '_') + 1) ->> 'steps_around')::integer, 0);
        v_root := v_up;
      end loop;
      -- the version wf_new_run starts (when there is none, it says so)
      select * into v_child_pipe from asyncflow.pipelines p where p.name = v_def ->> 'pipeline'
        and (case when v_def ->> 'version' is null then p.status = 'active' else p.version = (v_def ->> 'version')::integer end);
      v_steps := v_steps + coalesce((v_child_pipe.plan ->> 'steps')::integer, 0);
      if p_run.depth >= 8 then
        perform asyncflow.wf_fail_event(v_event_id, 'sub-pipelines nest deeper than 8 levels', p_now);
      elsif v_steps > asyncflow.plan_step_limit() then
        perform asyncflow.wf_fail_event(v_event_id, format('sub-pipeline %L version %s: with the runs above, one call '
          'could run %s steps, more than the limit of %s (its steps have grown since this pipeline was stored)',
          v_child_pipe.name, v_child_pipe.version, v_steps, asyncflow.plan_step_limit()), p_now);
      else
        -- (V36) counted on the root; rolled back with the child when wf_new_run raises
        update asyncflow.runs set sub_runs = sub_runs + 1
        where day = v_root.day and run_id = v_root.run_id and sub_runs < 1000;
        if not found then
          perform asyncflow.wf_fail_event(v_event_id, format('run %s has started 1000 sub-pipeline runs in its tree, '
            'the limit for one run', v_root.run_id), p_now);
        else
          v_child := asyncflow.wf_new_run(v_def ->> 'pipeline', (v_def ->> 'version')::integer,
            jsonb_build_object('parent_run', p_run.run_id, 'input', p_run.input, 'inputs', v_inputs),
            null, p_run.notify_key, null, v_event_id, p_run.depth + 1, 1, null, p_now);
          -- the child may have ended already (a pipeline of instant nodes) and completed this event
          update asyncflow.run_events set child_run = v_child, updated_at = p_now where day = p_run.day and event_id = v_event_id;
        end if;
      end if;
    when 'callback' then
      v_url := coalesce(v_def ->> 'url', p_run.notify_url);
      if v_url is null then
        perform asyncflow.wf_fail_event(v_event_id, 'no url: the node names none and the run has no notify_url', p_now);
      else
        perform asyncflow.wf_enqueue_callback(p_run, 'node', v_event_id, v_url, jsonb_build_object(
          'run_id', p_run.run_id, 'pipeline', p_run.pipeline, 'version', p_run.version, 'node', p_node,
          'notify_key', p_run.notify_key, 'input', p_run.input, 'inputs', v_inputs), p_now);
      end if;
    end case;
  exception
    when deadlock_detected or serialization_failure or lock_not_available or query_canceled then
      raise;
    when sqlstate 'AF001' or sqlstate 'AF005' or sqlstate 'AF006' or sqlstate 'AF011' or sqlstate 'AF013' then
      perform asyncflow.wf_fail_event(v_event_id, sqlerrm, p_now);
  end;
end
$$;

-- Plans stored before V36 get their steps (the limit is not applied to them: a version that
-- runs past it fails as before). A parent counts its children's steps, so this goes over the
-- versions until nothing changes, at most 9 times (8 levels of sub-pipelines below a root).
do $$
declare
  v_pass integer;
  v_changed integer;
begin
  for v_pass in 1 .. 9 loop
    update asyncflow.pipelines p set plan = s.plan
    from (select x.name, x.version, (asyncflow.plan_steps(x.plan)).plan from asyncflow.pipelines x
          -- after the first pass, only a plan with a sub-pipeline node can change
          where v_pass = 1 or jsonb_path_exists(x.plan, '$.nodes.*.type ? (@ == "pipeline")')) s
    where s.name = p.name and s.version = p.version and s.plan is distinct from p.plan;
    get diagnostics v_changed = row_count;
    exit when v_changed = 0;
  end loop;
end
$$;

revoke all on function asyncflow.plan_step_limit() from public;
revoke all on function asyncflow.plan_steps(jsonb) from public;
