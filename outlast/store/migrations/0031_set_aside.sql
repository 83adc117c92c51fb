-- compat: expand
-- Version 31: a message the run cannot take is set aside, not fatal. A payload stored without its
-- channel's type checked (`outlast_send` checks only the channel) that the run's program then
-- refuses is kept, marked with why (`set_aside`), and left out of the inbox; the run goes on
-- waiting for one it can take. Two nullable columns older code never reads.

-- Why the run could not take the message (its channel's type refused the payload), and when it
-- was set aside; NULL: not set aside (in the inbox while `taken_seq` is NULL too).
ALTER TABLE messages ADD COLUMN IF NOT EXISTS set_aside text;
ALTER TABLE messages ADD COLUMN IF NOT EXISTS set_aside_at timestamptz;
