-- compat: contract
-- Version 4: a finished run never changes, whoever writes: the whole row. Its input and
-- workflow are the record of what ran, as its result is. An UPDATE that leaves every column as
-- it was is let through. (The trigger runs_final_is_final, from 0001, calls this function.)
CREATE OR REPLACE FUNCTION outlast_final_is_final() RETURNS trigger AS $$
BEGIN
    IF OLD.state IN ('succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled')
       AND NEW IS DISTINCT FROM OLD THEN
        RAISE EXCEPTION 'run % is final (%): a finished run never changes', OLD.id, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
