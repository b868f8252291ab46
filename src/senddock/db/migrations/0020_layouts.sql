-- 0020: layouts and Markdown bodies (issue 22). Additive: older processes never read these.
-- A layout is a reusable template around a campaign's body: its HTML (and optionally its own
-- text) holds `{{ content }}` where the body goes. At most one layout is the default, which a
-- campaign created without naming one gets. A campaign names its layout by id; a layout some
-- campaign names cannot be deleted (RESTRICT, and a 409 before it).

CREATE TABLE layouts (
    id          bigserial PRIMARY KEY,
    name        text NOT NULL CHECK (name <> ''),
    html_body   text NOT NULL,
    text_body   text,
    is_default  boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX layouts_name ON layouts (lower(name));
-- One default at most: a second `is_default` row is a unique violation.
CREATE UNIQUE INDEX layouts_one_default ON layouts ((true)) WHERE is_default;

ALTER TABLE campaigns ADD COLUMN layout_id bigint REFERENCES layouts (id) ON DELETE RESTRICT;
-- The body in Markdown; its HTML is made from it once per broadcast (messages/layout.py).
ALTER TABLE campaigns ADD COLUMN markdown_body text;
CREATE INDEX campaigns_layout ON campaigns (layout_id) WHERE layout_id IS NOT NULL;
