-- Child tasks and a join (sql/api/46_children.sql): a stage replies {"spawn": [{"type", ...},
-- ...], "next_stage": S}; the children are created with the advance, and the task is `waiting`
-- until every child has ended, then pending at S.

-- The task that spawned this one (its id), or null.
alter table asyncflow.tasks add column if not exists parent_id text;

-- One row per task waiting for its children: a latch. `total` children were spawned (ids in
-- spawn order in `children`), `ended` of them have ended: each child's end adds to it (one row
-- update, whatever the number of children), and the one that makes it reach `total` starts the
-- join. `spawn` holds the reply's list from the report until its children are created, in the
-- same transaction. Outside the tasks' tables, like asyncflow.waits: a waiting parent is in no
-- index a claim reads. The row goes when the join starts or the parent is cancelled.
create table if not exists asyncflow.joins (
  task_type text not null,
  shard integer not null,
  id bigint not null,
  total integer not null default 0,
  ended integer not null default 0,
  children text[],
  spawn jsonb,
  since timestamptz not null,
  primary key (task_type, shard, id)
);

-- A parent's children, for the dashboard and task_children: only children are in it.
create index if not exists tasks_parent_id on asyncflow.tasks (parent_id) where parent_id is not null;
