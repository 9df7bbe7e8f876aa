-- rescue_expired also returns the stage, attempt and error of each rescued task (for the
-- rescuer's log line): its result type changed, so the old function is dropped here and the new
-- text in sql/api/50_maintenance.sql is applied after the migrations.
drop function if exists asyncflow.rescue_expired(timestamptz, integer);
