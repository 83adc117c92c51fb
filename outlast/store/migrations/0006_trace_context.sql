-- compat: contract
-- Version 6: the producer's trace context (W3C traceparent/tracestate), set by enqueue in the
-- same INSERT as the run: every attempt of the run continues the producer's trace. NULL when
-- the producer had no active span, or no OpenTelemetry.
ALTER TABLE runs ADD COLUMN trace_context jsonb;
