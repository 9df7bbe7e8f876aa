-- render_template takes a third argument, the template's variant ('claim' or 'hold'; see
-- sql/api/15_type_functions.sql): the two-argument function is dropped here, so that calls with
-- two arguments are not ambiguous, and the new text is applied after the migrations.
drop function if exists asyncflow.render_template(text, text);
