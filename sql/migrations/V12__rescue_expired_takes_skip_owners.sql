-- rescue_expired takes the workers whose leases it leaves alone (those of the rescuer's own
-- process): its arguments changed, so the old function is dropped here and the new text in
-- sql/api/50_maintenance.sql is applied after the migrations.
drop function if exists asyncflow.rescue_expired(timestamptz, integer);
