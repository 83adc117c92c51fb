-- The runs list, a page at a time (listing.py composes it, 0020): the filters given
-- (runs_where_*), joined by AND, in the order of the sort's index; the page after a cursor starts
-- past its key and id (runs_after_*). {key} is created_at, started_at or finished_at. The page's
-- ids are found first, from the filter's index alone (an index-only scan: the index holds the
-- filter, the key and the id), then their rows: else Postgres prefers walking runs_by_created
-- and throwing away the rows of other queues, several pages of rows for one.

-- name: runs_page
SELECT *, finished_at - coalesce(started_at, created_at) AS duration FROM runs
WHERE id IN (SELECT id FROM runs WHERE {where} ORDER BY {order} LIMIT %(limit)s)
ORDER BY {order}

-- name: runs_page_direct
-- A page searched by input or id prefix: read in one step (the GIN index, or the id's).
SELECT *, finished_at - coalesce(started_at, created_at) AS duration FROM runs
WHERE {where} ORDER BY {order} LIMIT %(limit)s

-- name: runs_order_time
{key} DESC, id DESC

-- name: runs_order_id
id COLLATE "C"

-- name: runs_after_time
({key}, id) < (%(after_at)s, %(after_id)s)

-- name: runs_after_id
id COLLATE "C" > %(after_id)s

-- name: runs_where_sorted
{key} IS NOT NULL

-- name: runs_where_since
{key} >= %(since)s

-- name: runs_where_until
{key} < %(until)s

-- name: runs_where_state
state = %(state)s

-- name: runs_where_workflow
workflow = %(workflow)s

-- name: runs_where_queue
queue = %(queue)s

-- name: runs_where_tenant
tenant = %(tenant)s

-- name: runs_where_priority
priority = %(priority)s

-- name: runs_where_parent
started_by = %(parent)s

-- name: runs_where_in_doubt
state = 'waiting' AND reason = 'in_doubt'

-- name: runs_where_input
input @> %(input)s

-- name: runs_where_id_prefix
id COLLATE "C" >= %(id_prefix)s AND id COLLATE "C" < %(id_next)s AND starts_with(id, %(id_prefix)s)
