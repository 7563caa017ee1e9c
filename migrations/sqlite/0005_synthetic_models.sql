-- Whether a model file's weights are random (written by `strata model synth` at a real model's shapes),
-- SQLite dialect; migrations/postgres/0005 adds the same. Speed measured on such a file is real, its
-- quality is not, and every figure made from it says so.
ALTER TABLE models
    ADD COLUMN synthetic BOOLEAN NOT NULL DEFAULT FALSE;
