-- Clients waiting for tasks to end (sql/api/47_task_waiters.sql): one row per task somebody
-- waits on, until when. The statements that end tasks look here first, so a NOTIFY is sent
-- only for a task with a waiter; a table with no row of a type costs its reports one probe.
create table if not exists asyncflow.task_waiters (
  task_type text not null,
  shard integer not null,
  id bigint not null,
  until timestamptz not null,
  primary key (task_type, shard, id)
);
