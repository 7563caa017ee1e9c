-- The engine's steps as fitted from its own timings during a capacity search, SQLite dialect.
-- migrations/postgres/0003_step_models.sql adds the same column.
-- NULL when the engine recorded no usable timings (or the result predates them): the planner then
-- derives the steps from the load curve.
ALTER TABLE capacity_results
    ADD COLUMN step_model TEXT CHECK (step_model IS NULL OR json_valid(step_model));
