-- Children that ended count on their parents' joins (sql/api/46_children.sql): one row update per
-- parent, whatever the number of its children ending here. After `changed` (status, parent_id:
-- the rows written).
child_ends as (
    update asyncflow.joins j set ended = j.ended + x.n
    from asyncflow.join_counts(array(select c.parent_id from changed c where c.status in ('succeeded', 'failed'))) x
    where j.task_type = x.task_type and j.shard = x.shard and j.id = x.id
  )
