-- compat: contract
-- Version 5: ready for growth. The two tables that grow with every operation, `journal` and
-- `events`, are hash-partitioned by run id (16 partitions each). Every query names its run, so each
-- touches one partition; indexes and vacuums stay partition-sized. Hash, not time: a time key would
-- have to join the primary key and weaken `(run_id, seq)` as the journal's one-entry-per-position
-- guard. Existing rows are moved in this migration's transaction.

ALTER TABLE journal RENAME TO journal_unpartitioned;
ALTER TABLE journal_unpartitioned RENAME CONSTRAINT journal_pkey TO journal_unpartitioned_pkey;
CREATE TABLE journal (
    run_id      text NOT NULL REFERENCES runs (id),
    seq         integer NOT NULL,
    kind        text NOT NULL,
    op_id       text,
    body        text NOT NULL,
    hash        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
) PARTITION BY HASH (run_id);

-- The events' ids stay one sequence across runs (`events --follow` reads after an id).
ALTER SEQUENCE events_id_seq OWNED BY NONE;
ALTER TABLE events RENAME TO events_unpartitioned;
ALTER TABLE events_unpartitioned RENAME CONSTRAINT events_pkey TO events_unpartitioned_pkey;
DROP INDEX events_by_run;
CREATE TABLE events (
    id          bigint NOT NULL DEFAULT nextval('events_id_seq'),
    run_id      text NOT NULL REFERENCES runs (id),
    at          timestamptz NOT NULL DEFAULT now(),
    kind        text NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, id)
) PARTITION BY HASH (run_id);
ALTER SEQUENCE events_id_seq OWNED BY events.id;

DO $$
BEGIN
    FOR i IN 0..15 LOOP
        EXECUTE format('CREATE TABLE journal_p%s PARTITION OF journal FOR VALUES WITH (MODULUS 16, REMAINDER %s)', i, i);
        EXECUTE format('CREATE TABLE events_p%s PARTITION OF events FOR VALUES WITH (MODULUS 16, REMAINDER %s)', i, i);
    END LOOP;
END $$;

INSERT INTO journal SELECT * FROM journal_unpartitioned;
INSERT INTO events SELECT * FROM events_unpartitioned;
DROP TABLE journal_unpartitioned;
DROP TABLE events_unpartitioned;
