-- V39: engine review fixes.
--
-- plan_steps (V36) counted as skippable by a router every node below one, including nodes that
-- always have a live in-edge (a join of all of a router's branches, or a node fed by a node no
-- router can skip); their task nodes then did not cut the chain, and valid pipelines of about
-- 300 task nodes after such a join were refused with AF010 (a few hundred steps that can never
-- run in one call). A node is now skippable only when it is neither start, nor the target of a
-- live node that is not a router, nor a post-dominator of a live node. The stored plans are
-- given their steps again. plan_steps is replaced whole (the migration convention).

CREATE OR REPLACE FUNCTION asyncflow.plan_steps(p_plan jsonb, out plan jsonb, out path text[])
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
  -- (V39) per node: its place in v_topo; its immediate post-dominator (the first node every path
  -- from it to the end passes); whether the call that reaches it live always reaches it live
  v_pos integer[];
  v_ipdom integer[];
  v_a integer;
  v_d integer;
  v_live boolean[];
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

  -- (V39) Which nodes a router's choice may skip. A node is skipped only when every in-edge is
  -- dead (wf_arrive), and V36 counted as skippable every node below a router, also a node with a
  -- live in-edge whatever the routers choose: a join of all of a router's branches, or one fed by
  -- a node no router can skip. Its task nodes then carried the chain on, and a valid pipeline of
  -- about 300 task nodes after such a join was refused (and parents of it counted its steps).
  -- Now a node cannot be skipped (is live) when it is start, when a live node that is not a router
  -- has an edge to it (every such edge is taken), or when it post-dominates a live node (from a
  -- live node some branch is always taken, on to the end, and every branch passes it).
  v_pos := array_fill(0, array[v_n]);
  for v_head in 1 .. cardinality(v_topo) loop
    v_pos[v_topo[v_head]] := v_head;
  end loop;
  -- immediate post-dominators, from the end back (Cooper, Harvey and Kennedy's intersection; in a
  -- DAG whose every node reaches the end, which is last in v_topo, one pass suffices)
  v_ipdom := array_fill(null::integer, array[v_n]);
  for v_head in reverse cardinality(v_topo) .. 1 loop
    v_k := v_topo[v_head];
    v_d := null;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_a := v_ti[v_out[v_j]];
      if v_d is null then
        v_d := v_a;
        continue;
      end if;
      while v_a <> v_d loop
        while v_pos[v_a] < v_pos[v_d] loop
          v_a := v_ipdom[v_a];
        end loop;
        while v_pos[v_d] < v_pos[v_a] loop
          v_d := v_ipdom[v_d];
        end loop;
      end loop;
    end loop;
    v_ipdom[v_k] := v_d;
  end loop;
  v_live := array_fill(false, array[v_n]);
  if v_n > 0 then
    v_live[v_topo[1]] := true;
  end if;
  foreach v_k in array v_topo loop
    continue when not v_live[v_k];
    if v_types[v_k] <> 'router' then
      for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
        v_live[v_ti[v_out[v_j]]] := true;
      end loop;
    end if;
    -- a node already live walks its own post-dominators when its turn comes
    v_i := v_ipdom[v_k];
    while v_i is not null and not v_live[v_i] loop
      v_live[v_i] := true;
      v_i := v_ipdom[v_i];
    end loop;
  end loop;

  v_skippable := array(select not v_live[k] from generate_series(1, v_n) k);
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

-- The stored plans get their steps again, as V36 gave them (a parent counts its children's
-- steps: over the versions until nothing changes, at most 9 times). Steps only go down: a node
-- skippable now was skippable before.
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
