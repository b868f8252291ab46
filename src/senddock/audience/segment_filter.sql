-- The SQL pieces a segment filter compiles into (segment_filter.py): boolean expressions over
-- the subscriber row `s`. `{path}`, `{type}` and `{value}` are always placeholders (what the
-- person wrote is data, never SQL text); `{op}` comes from the compiler's fixed operator table,
-- `{column}` from its fixed column table. Each is false, never NULL, so `not` is plain logic.

-- name: everyone
-- No filter: every subscriber the lists hold.
true

-- name: negate
-- not X: X is never NULL (each piece below says false for a missing attribute).
NOT ({node})

-- name: attribute_exists
-- exists attributes.KEY: the key is there (a JSON null counts as there).
(s.attributes #> {path}::text[]) IS NOT NULL

-- name: attribute_compare
-- attributes.KEY OP value: false when the key is missing or holds another JSON type than the
-- value's (the string "5" is not the number 5); jsonb compares numbers numerically.
coalesce(jsonb_typeof(s.attributes #> {path}::text[]) = {type}::text
         AND (s.attributes #> {path}::text[]) {op} {value}::jsonb, false)

-- name: attribute_date
-- attributes.KEY OP date: attributes hold dates as ISO strings, compared as text (a cast could
-- fail on one subscriber's odd value and stop the whole enqueue).
coalesce(jsonb_typeof(s.attributes #> {path}::text[]) = 'string'
         AND (s.attributes #>> {path}::text[]) {op} {value}::text, false)

-- name: text_column
-- email / name OP string.
coalesce({column} {op} {value}::text, false)

-- name: time_column
-- created_at / updated_at OP date (a timestamptz parameter: the zone is the filter's, or UTC).
coalesce({column} {op} {value}::timestamptz, false)
