-- Debounce (create_task's debounce_key and debounce_for): one row per key of a type, naming the
-- task the key's creates go to while it is pending and has not started. A create with the key
-- takes the row first (inserted, or locked), so creators of one key run one at a time.
create table if not exists asyncflow.debounce_keys (
  task_type text not null references asyncflow.task_types on delete cascade,
  debounce_key text not null check (length(debounce_key) between 1 and 255),
  shard integer not null,
  id bigint not null,
  -- the start the key's last create set: retention drops a row long after it
  start_at timestamptz not null,
  primary key (task_type, debounce_key)
);
create index if not exists debounce_keys_start_at on asyncflow.debounce_keys (start_at);

-- create_task and create_task_general take debounce_key and debounce_for: the signatures without
-- them go
drop function if exists asyncflow.create_task(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text, text, integer, text);
drop function if exists asyncflow.create_task_general(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text, text, integer, text);
