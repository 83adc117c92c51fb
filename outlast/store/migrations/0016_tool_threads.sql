-- compat: expand
-- Version 16: the threads a worker process runs its sync tools on, in its heartbeat record:
-- how many are alive, and how many are busy (on a tool now: a hung tool holds its thread).
ALTER TABLE workers
    ADD COLUMN tool_threads      integer NOT NULL DEFAULT 0,
    ADD COLUMN tool_threads_busy integer NOT NULL DEFAULT 0;
