-- The schema after every migration, generated: do not edit by hand. To change the schema, add a
-- migration under src/senddock/db/migrations/, then regenerate this file with
--   python3 dev.py schema
-- tests/test_schema_file.py fails while it differs from a freshly migrated database.
-- Written by Postgres 18 (the embedded server of the tests; its deparsers' output can
-- change from one major version to the next).

-- ===== admins =====
CREATE TABLE admins (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    email text NOT NULL,
    password_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT admins_pkey PRIMARY KEY (id)
);
CREATE UNIQUE INDEX admins_email_key ON public.admins USING btree (lower(email));

-- ===== api_tokens =====
CREATE TABLE api_tokens (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    token_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    last_used_at timestamp with time zone,
    expires_at timestamp with time zone,
    CONSTRAINT api_tokens_pkey PRIMARY KEY (id),
    CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash)
);

-- ===== app_secrets =====
CREATE TABLE app_secrets (
    name text NOT NULL,
    value text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT app_secrets_pkey PRIMARY KEY (name)
);

-- ===== bounce_effects =====
CREATE TABLE bounce_effects (
    broadcast_id bigint NOT NULL,
    subscriber_id bigint NOT NULL,
    kind text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT bounce_effects_pkey PRIMARY KEY (broadcast_id, subscriber_id, kind),
    CONSTRAINT bounce_effects_kind_check CHECK (kind = ANY (ARRAY['hard'::text, 'soft'::text, 'policy'::text, 'complaint'::text]))
);

-- ===== bounce_findings =====
CREATE TABLE bounce_findings (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    message_id bigint NOT NULL,
    recipient text,
    kind text NOT NULL,
    status text,
    reply text,
    diagnostic text,
    broadcast_id bigint,
    subscriber_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    reason text,
    CONSTRAINT bounce_findings_pkey PRIMARY KEY (id),
    CONSTRAINT bounce_findings_message_id_fkey FOREIGN KEY (message_id) REFERENCES bounce_messages(id) ON DELETE CASCADE,
    CONSTRAINT bounce_findings_kind_check CHECK (kind = ANY (ARRAY['hard'::text, 'soft'::text, 'policy'::text, 'complaint'::text])),
    CONSTRAINT bounce_findings_reason_check CHECK (reason ~ '^[a-z]{1,40}$'::text)
);
CREATE INDEX bounce_findings_broadcast ON public.bounce_findings USING btree (broadcast_id, kind) WHERE (broadcast_id IS NOT NULL);
CREATE INDEX bounce_findings_matched ON public.bounce_findings USING btree (subscriber_id, id) WHERE (subscriber_id IS NOT NULL);
CREATE INDEX bounce_findings_recipient ON public.bounce_findings USING btree (lower(recipient), created_at);
CREATE INDEX bounce_findings_subscriber ON public.bounce_findings USING btree (subscriber_id, created_at) WHERE ((subscriber_id IS NOT NULL) AND (kind = 'soft'::text));

-- ===== bounce_messages =====
CREATE TABLE bounce_messages (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    source text NOT NULL,
    envelope_to text,
    digest bytea NOT NULL,
    size integer NOT NULL,
    raw bytea,
    state text DEFAULT 'received'::text NOT NULL,
    why text,
    CONSTRAINT bounce_messages_pkey PRIMARY KEY (id),
    CONSTRAINT bounce_messages_digest_key UNIQUE (digest),
    CONSTRAINT bounce_messages_source_check CHECK (source = ANY (ARRAY['smtp'::text, 'imap'::text, 'pop3'::text, 'pipe'::text, 'ses'::text, 'mailgun'::text, 'sendgrid'::text, 'postmark'::text])),
    CONSTRAINT bounce_messages_state_check CHECK (state = ANY (ARRAY['received'::text, 'read'::text, 'none'::text, 'unparsable'::text]))
);
CREATE INDEX bounce_messages_raw_kept ON public.bounce_messages USING btree (received_at) WHERE (raw IS NOT NULL);

-- ===== broadcast_counts =====
CREATE TABLE broadcast_counts (
    broadcast_id bigint NOT NULL,
    state text NOT NULL,
    slot smallint NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT broadcast_counts_pkey PRIMARY KEY (broadcast_id, state, slot)
);

-- ===== broadcast_enqueues =====
CREATE TABLE broadcast_enqueues (
    broadcast_id bigint NOT NULL,
    part integer NOT NULL,
    after_id bigint NOT NULL,
    last_id bigint NOT NULL,
    since timestamp with time zone NOT NULL,
    chunks integer DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT broadcast_enqueues_pkey PRIMARY KEY (broadcast_id, part),
    CONSTRAINT broadcast_enqueues_broadcast_id_fkey FOREIGN KEY (broadcast_id) REFERENCES broadcasts(id) ON DELETE CASCADE
);

-- ===== broadcast_jobs =====
CREATE TABLE broadcast_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    broadcast_id bigint NOT NULL,
    subscriber_id bigint NOT NULL,
    email text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    owner bigint,
    claimed_at timestamp with time zone,
    failure text,
    sender_faults integer DEFAULT 0 NOT NULL,
    last_code integer,
    last_enhanced text,
    last_reply text,
    last_stage text,
    sent_at timestamp with time zone,
    message_id text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    deaths smallint DEFAULT 0 NOT NULL,
    alone_deaths smallint DEFAULT 0 NOT NULL,
    suspect_claim boolean DEFAULT false NOT NULL,
    bounced_at timestamp with time zone,
    bounce_kind text,
    dot_at timestamp with time zone,
    dot_relay text,
    next_dot bigint,
    next_relay text,
    bounce_reason text,
    settled_by text,
    settled_at timestamp with time zone,
    CONSTRAINT broadcast_jobs_pkey PRIMARY KEY (id),
    CONSTRAINT broadcast_jobs_bounce_kind_check CHECK (bounce_kind = ANY (ARRAY['hard'::text, 'soft'::text, 'policy'::text, 'complaint'::text])),
    CONSTRAINT broadcast_jobs_bounce_reason_check CHECK (bounce_reason ~ '^[a-z]{1,40}$'::text),
    CONSTRAINT broadcast_jobs_status_check CHECK (status = ANY (ARRAY['pending'::text, 'sending'::text, 'retry'::text, 'sent'::text, 'failed'::text, 'cancelled'::text, 'unconfirmed'::text]))
) WITH (fillfactor=80, autovacuum_vacuum_scale_factor=0.02, autovacuum_vacuum_insert_scale_factor=0.02, autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_delay=0);
CREATE INDEX broadcast_jobs_claimable ON public.broadcast_jobs USING btree (run_at) WHERE (status = ANY (ARRAY['pending'::text, 'retry'::text]));
CREATE INDEX broadcast_jobs_next_dot ON public.broadcast_jobs USING btree (next_dot) WHERE (next_dot IS NOT NULL);
CREATE UNIQUE INDEX broadcast_jobs_once ON public.broadcast_jobs USING btree (broadcast_id, subscriber_id) INCLUDE (status, failure);
CREATE INDEX broadcast_jobs_problems ON public.broadcast_jobs USING btree (broadcast_id, updated_at) WHERE ((status = ANY (ARRAY['retry'::text, 'failed'::text])) AND (last_reply IS NOT NULL));
CREATE INDEX broadcast_jobs_sending ON public.broadcast_jobs USING btree (owner) WHERE (status = 'sending'::text);
CREATE INDEX broadcast_jobs_suspects ON public.broadcast_jobs USING btree (run_at) WHERE ((status = ANY (ARRAY['pending'::text, 'retry'::text])) AND (deaths > 0));
CREATE INDEX broadcast_jobs_unconfirmed ON public.broadcast_jobs USING btree (broadcast_id) WHERE (status = 'unconfirmed'::text);
CREATE TRIGGER broadcast_jobs_count_inserts AFTER INSERT ON broadcast_jobs REFERENCING NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION senddock_count_inserted_jobs();
CREATE TRIGGER broadcast_jobs_count_updates AFTER UPDATE ON broadcast_jobs REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs FOR EACH STATEMENT EXECUTE FUNCTION senddock_count_updated_jobs();

-- ===== broadcasts =====
CREATE TABLE broadcasts (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    campaign_id bigint NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    total integer NOT NULL,
    last_sender_fault text,
    pause_reason text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    generation integer DEFAULT 0 NOT NULL,
    message_token text,
    message_domain text,
    final_counts jsonb,
    purged_at timestamp with time zone,
    audience_filter text,
    CONSTRAINT broadcasts_pkey PRIMARY KEY (id),
    CONSTRAINT broadcasts_campaign_id_key UNIQUE (campaign_id),
    CONSTRAINT broadcasts_campaign_id_fkey FOREIGN KEY (campaign_id) REFERENCES campaigns(id),
    CONSTRAINT broadcasts_status_check CHECK (status = ANY (ARRAY['running'::text, 'paused'::text, 'finished'::text, 'cancelled'::text]))
);
CREATE TRIGGER broadcasts_delete_cascade BEFORE DELETE ON broadcasts FOR EACH ROW EXECUTE FUNCTION senddock_broadcast_delete_cascade();
CREATE TRIGGER campaign_follows_broadcast AFTER INSERT OR UPDATE OF status ON broadcasts FOR EACH ROW EXECUTE FUNCTION campaign_follows_broadcast();

-- ===== campaign_lists =====
CREATE TABLE campaign_lists (
    campaign_id bigint NOT NULL,
    list_id bigint NOT NULL,
    CONSTRAINT campaign_lists_pkey PRIMARY KEY (campaign_id, list_id),
    CONSTRAINT campaign_lists_campaign_id_fkey FOREIGN KEY (campaign_id) REFERENCES campaigns(id) ON DELETE CASCADE,
    CONSTRAINT campaign_lists_list_id_fkey FOREIGN KEY (list_id) REFERENCES lists(id)
);

-- ===== campaigns =====
CREATE TABLE campaigns (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    name text NOT NULL,
    subject text NOT NULL,
    from_addr text NOT NULL,
    text_body text,
    html_body text,
    status text DEFAULT 'draft'::text NOT NULL,
    broadcast_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    reply_to text,
    send_at timestamp with time zone,
    schedule_error text,
    archived_at timestamp with time zone,
    layout_id bigint,
    markdown_body text,
    segment_id bigint,
    audience_filter text,
    track text DEFAULT ''::text NOT NULL,
    CONSTRAINT campaigns_pkey PRIMARY KEY (id),
    CONSTRAINT campaigns_broadcast_fk FOREIGN KEY (broadcast_id) REFERENCES broadcasts(id),
    CONSTRAINT campaigns_layout_id_fkey FOREIGN KEY (layout_id) REFERENCES layouts(id) ON DELETE RESTRICT,
    CONSTRAINT campaigns_segment_id_fkey FOREIGN KEY (segment_id) REFERENCES segments(id) ON DELETE RESTRICT,
    CONSTRAINT campaigns_has_body CHECK (text_body IS NOT NULL OR html_body IS NOT NULL),
    CONSTRAINT campaigns_one_audience_filter CHECK (segment_id IS NULL OR audience_filter IS NULL),
    CONSTRAINT campaigns_status_check CHECK (status = ANY (ARRAY['draft'::text, 'sending'::text, 'paused'::text, 'sent'::text, 'cancelled'::text])),
    CONSTRAINT campaigns_track_check CHECK (track = ANY (ARRAY[''::text, 'opens'::text, 'clicks'::text, 'opens,clicks'::text, 'opens,anonymous'::text, 'clicks,anonymous'::text, 'opens,clicks,anonymous'::text]))
);
CREATE INDEX campaigns_due ON public.campaigns USING btree (send_at) WHERE ((status = 'draft'::text) AND (send_at IS NOT NULL));
CREATE INDEX campaigns_layout ON public.campaigns USING btree (layout_id) WHERE (layout_id IS NOT NULL);

-- ===== erased_suppressions =====
CREATE TABLE erased_suppressions (
    digest bytea NOT NULL,
    reason text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT erased_suppressions_pkey PRIMARY KEY (digest)
);

-- ===== import_jobs =====
CREATE TABLE import_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    list_name text NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    rows_read integer DEFAULT 0 NOT NULL,
    imported integer DEFAULT 0 NOT NULL,
    rejected integer DEFAULT 0 NOT NULL,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    rows_done integer DEFAULT 0 NOT NULL,
    CONSTRAINT import_jobs_pkey PRIMARY KEY (id),
    CONSTRAINT import_jobs_status_check CHECK (status = ANY (ARRAY['queued'::text, 'running'::text, 'done'::text, 'failed'::text]))
);
CREATE INDEX import_jobs_open ON public.import_jobs USING btree (id) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]));

-- ===== import_uploads =====
CREATE TABLE import_uploads (
    job_id bigint NOT NULL,
    content bytea NOT NULL,
    CONSTRAINT import_uploads_pkey PRIMARY KEY (job_id),
    CONSTRAINT import_uploads_job_id_fkey FOREIGN KEY (job_id) REFERENCES import_jobs(id) ON DELETE CASCADE
);

-- ===== layouts =====
CREATE TABLE layouts (
    id bigint DEFAULT nextval('layouts_id_seq'::regclass) NOT NULL,
    name text NOT NULL,
    html_body text NOT NULL,
    text_body text,
    is_default boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT layouts_pkey PRIMARY KEY (id),
    CONSTRAINT layouts_name_check CHECK (name <> ''::text)
);
CREATE UNIQUE INDEX layouts_name ON public.layouts USING btree (lower(name));
CREATE UNIQUE INDEX layouts_one_default ON public.layouts USING btree ((true)) WHERE is_default;

-- ===== list_memberships =====
CREATE TABLE list_memberships (
    list_id bigint NOT NULL,
    subscriber_id bigint NOT NULL,
    status text DEFAULT 'confirmed'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT list_memberships_pkey PRIMARY KEY (list_id, subscriber_id),
    CONSTRAINT list_memberships_list_id_fkey FOREIGN KEY (list_id) REFERENCES lists(id) ON DELETE CASCADE,
    CONSTRAINT list_memberships_subscriber_id_fkey FOREIGN KEY (subscriber_id) REFERENCES subscribers(id) ON DELETE CASCADE,
    CONSTRAINT list_memberships_status_check CHECK (status = ANY (ARRAY['unconfirmed'::text, 'confirmed'::text, 'unsubscribed'::text]))
);

-- ===== lists =====
CREATE TABLE lists (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    double_opt_in boolean DEFAULT false NOT NULL,
    from_addr text,
    public boolean DEFAULT false NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    consent_text text,
    CONSTRAINT lists_pkey PRIMARY KEY (id),
    CONSTRAINT lists_name_key UNIQUE (name),
    CONSTRAINT lists_consent_text_check CHECK (consent_text IS NULL OR length(consent_text) >= 1 AND length(consent_text) <= 2000),
    CONSTRAINT lists_opt_in_has_sender CHECK (NOT double_opt_in OR from_addr IS NOT NULL)
);

-- ===== login_attempts =====
CREATE TABLE login_attempts (
    key text NOT NULL,
    window_start timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    CONSTRAINT login_attempts_pkey PRIMARY KEY (key)
);
CREATE INDEX login_attempts_window ON public.login_attempts USING btree (window_start);

-- ===== reconcile_notes =====
CREATE TABLE reconcile_notes (
    broadcast_id bigint NOT NULL,
    job_id bigint NOT NULL,
    source text NOT NULL,
    said text NOT NULL,
    detail text DEFAULT ''::text NOT NULL,
    noted_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT reconcile_notes_pkey PRIMARY KEY (broadcast_id, job_id, source),
    CONSTRAINT reconcile_notes_said_check CHECK (said = ANY (ARRAY['accepted'::text, 'not accepted'::text, 'not seen'::text, 'cannot tell'::text]))
);

-- ===== schema_migrations =====
CREATE TABLE schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);

-- ===== segments =====
CREATE TABLE segments (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    name text NOT NULL,
    filter text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT segments_pkey PRIMARY KEY (id),
    CONSTRAINT segments_name_key UNIQUE (name)
);

-- ===== sessions =====
CREATE TABLE sessions (
    id_hash text NOT NULL,
    admin_id bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT sessions_pkey PRIMARY KEY (id_hash),
    CONSTRAINT sessions_admin_id_fkey FOREIGN KEY (admin_id) REFERENCES admins(id) ON DELETE CASCADE
);
CREATE INDEX sessions_admin ON public.sessions USING btree (admin_id);

-- ===== signup_consents =====
CREATE TABLE signup_consents (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    subscriber_id bigint NOT NULL,
    list_id bigint,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    ip text NOT NULL,
    user_agent text DEFAULT ''::text NOT NULL,
    double_opt_in boolean NOT NULL,
    confirmed_at timestamp with time zone,
    consent_text text DEFAULT ''::text NOT NULL,
    CONSTRAINT signup_consents_pkey PRIMARY KEY (id),
    CONSTRAINT signup_consents_list_id_fkey FOREIGN KEY (list_id) REFERENCES lists(id) ON DELETE SET NULL,
    CONSTRAINT signup_consents_subscriber_id_fkey FOREIGN KEY (subscriber_id) REFERENCES subscribers(id) ON DELETE CASCADE
);
CREATE INDEX signup_consents_member ON public.signup_consents USING btree (subscriber_id, list_id);

-- ===== smtp_rate_windows =====
CREATE TABLE smtp_rate_windows (
    server text NOT NULL,
    second_start timestamp with time zone NOT NULL,
    second_used bigint NOT NULL,
    minute_start timestamp with time zone NOT NULL,
    minute_used bigint NOT NULL,
    hour_start timestamp with time zone NOT NULL,
    hour_used bigint NOT NULL,
    CONSTRAINT smtp_rate_windows_pkey PRIMARY KEY (server)
) WITH (fillfactor=50);

-- ===== subscribers =====
CREATE TABLE subscribers (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    email text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    attributes jsonb DEFAULT '{}'::jsonb NOT NULL,
    status text DEFAULT 'active'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    erased_at timestamp with time zone,
    CONSTRAINT subscribers_pkey PRIMARY KEY (id),
    CONSTRAINT subscribers_status_check CHECK (status = ANY (ARRAY['active'::text, 'bounced'::text, 'erased'::text]))
);
CREATE INDEX subscribers_created_brin ON public.subscribers USING brin (created_at);
CREATE UNIQUE INDEX subscribers_email_key ON public.subscribers USING btree (lower(email));
CREATE TRIGGER subscribers_delete_guard BEFORE DELETE ON subscribers FOR EACH ROW EXECUTE FUNCTION senddock_subscriber_delete_guard();
CREATE TRIGGER subscribers_resuppress_inserted AFTER INSERT ON subscribers REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION senddock_resuppress_erased();
CREATE TRIGGER subscribers_resuppress_updated AFTER UPDATE ON subscribers REFERENCING NEW TABLE AS written FOR EACH STATEMENT EXECUTE FUNCTION senddock_resuppress_erased();

-- ===== subscription_events =====
CREATE TABLE subscription_events (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    subscriber_id bigint NOT NULL,
    list_id bigint,
    action text NOT NULL,
    source text NOT NULL,
    campaign_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT subscription_events_pkey PRIMARY KEY (id),
    CONSTRAINT subscription_events_list_id_fkey FOREIGN KEY (list_id) REFERENCES lists(id) ON DELETE SET NULL,
    CONSTRAINT subscription_events_subscriber_id_fkey FOREIGN KEY (subscriber_id) REFERENCES subscribers(id) ON DELETE CASCADE,
    CONSTRAINT subscription_events_action_check CHECK (action = ANY (ARRAY['join'::text, 'leave'::text, 'unsubscribe_all'::text]))
);
CREATE INDEX subscription_events_created_brin ON public.subscription_events USING brin (created_at);
CREATE INDEX subscription_events_subscriber ON public.subscription_events USING btree (subscriber_id, created_at);

-- ===== suppressions =====
CREATE TABLE suppressions (
    email text NOT NULL,
    reason text NOT NULL,
    source_broadcast_id bigint,
    detail text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    bounce_reason text,
    CONSTRAINT suppressions_source_broadcast_id_fkey FOREIGN KEY (source_broadcast_id) REFERENCES broadcasts(id) ON DELETE SET NULL,
    CONSTRAINT suppressions_bounce_reason_check CHECK (bounce_reason ~ '^[a-z]{1,40}$'::text),
    CONSTRAINT suppressions_reason_check CHECK (reason = ANY (ARRAY['bounce'::text, 'unsubscribe'::text, 'complaint'::text, 'manual'::text]))
);
CREATE INDEX suppressions_created_brin ON public.suppressions USING brin (created_at);
CREATE UNIQUE INDEX suppressions_email_key ON public.suppressions USING btree (lower(email));

-- ===== track_events =====
CREATE TABLE track_events (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    broadcast_id bigint NOT NULL,
    subscriber_id bigint,
    link_id bigint,
    kind text NOT NULL,
    at timestamp with time zone NOT NULL,
    user_agent text DEFAULT ''::text NOT NULL,
    machine boolean DEFAULT false NOT NULL,
    why text,
    CONSTRAINT track_events_pkey PRIMARY KEY (id),
    CONSTRAINT track_events_broadcast_id_fkey FOREIGN KEY (broadcast_id) REFERENCES broadcasts(id) ON DELETE CASCADE,
    CONSTRAINT track_events_link_id_fkey FOREIGN KEY (link_id) REFERENCES tracked_links(id) ON DELETE CASCADE,
    CONSTRAINT track_events_subscriber_id_fkey FOREIGN KEY (subscriber_id) REFERENCES subscribers(id) ON DELETE SET NULL,
    CONSTRAINT track_events_check CHECK ((kind = 'click'::text) = (link_id IS NOT NULL)),
    CONSTRAINT track_events_kind_check CHECK (kind = ANY (ARRAY['open'::text, 'click'::text, 'trap'::text])),
    CONSTRAINT track_events_user_agent_check CHECK (length(user_agent) <= 500)
);
CREATE INDEX track_events_broadcast ON public.track_events USING btree (broadcast_id, kind, subscriber_id);
CREATE INDEX track_events_link ON public.track_events USING btree (link_id) WHERE (link_id IS NOT NULL);
CREATE INDEX track_events_subscriber ON public.track_events USING btree (subscriber_id) WHERE (subscriber_id IS NOT NULL);

-- ===== tracked_links =====
CREATE TABLE tracked_links (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    broadcast_id bigint NOT NULL,
    position integer NOT NULL,
    url text NOT NULL,
    CONSTRAINT tracked_links_pkey PRIMARY KEY (id),
    CONSTRAINT tracked_links_broadcast_id_url_key UNIQUE (broadcast_id, url),
    CONSTRAINT tracked_links_broadcast_id_fkey FOREIGN KEY (broadcast_id) REFERENCES broadcasts(id) ON DELETE CASCADE
);

-- ===== worker_deaths =====
CREATE TABLE worker_deaths (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    worker_id bigint NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    last_heartbeat timestamp with time zone NOT NULL,
    found_at timestamp with time zone DEFAULT now() NOT NULL,
    reason text NOT NULL,
    jobs_held integer NOT NULL,
    broadcast_ids bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    CONSTRAINT worker_deaths_pkey PRIMARY KEY (id)
);
CREATE INDEX worker_deaths_broadcasts ON public.worker_deaths USING gin (broadcast_ids);
CREATE INDEX worker_deaths_host_pid ON public.worker_deaths USING btree (host, pid, found_at);

-- ===== workers =====
CREATE TABLE workers (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    host text NOT NULL,
    boot_id text NOT NULL,
    pid integer NOT NULL,
    pid_started text NOT NULL,
    concurrency integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    stopping boolean DEFAULT false NOT NULL,
    exit_reason text,
    dot_log text,
    CONSTRAINT workers_pkey PRIMARY KEY (id)
);

CREATE OR REPLACE FUNCTION public.campaign_follows_broadcast()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status IS NOT DISTINCT FROM OLD.status THEN
        RETURN NULL;
    END IF;
    UPDATE campaigns SET status = campaign_status_of(NEW.status), updated_at = now()
    WHERE id = NEW.campaign_id;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.campaign_status_of(broadcast_status text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE STRICT
AS $function$
    SELECT CASE broadcast_status
        WHEN 'running' THEN 'sending'
        WHEN 'paused' THEN 'paused'
        WHEN 'finished' THEN 'sent'
        WHEN 'cancelled' THEN 'cancelled'
    END
$function$;

CREATE OR REPLACE FUNCTION public.senddock_broadcast_delete_cascade()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    DELETE FROM broadcast_jobs WHERE broadcast_id = OLD.id;
    RETURN OLD;
END $function$;

CREATE OR REPLACE FUNCTION public.senddock_carried_mark(job_id bigint, job_owner bigint, claimed timestamp with time zone)
 RETURNS TABLE(at timestamp with time zone, relay text)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT p.updated_at, p.next_relay FROM broadcast_jobs p
    WHERE p.next_dot = job_id AND p.owner = job_owner AND p.updated_at > claimed
    ORDER BY p.updated_at DESC
    LIMIT 1
$function$;

CREATE OR REPLACE FUNCTION public.senddock_count_inserted_jobs()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO broadcast_counts AS c (broadcast_id, state, slot, n)
    SELECT d.broadcast_id, d.state, pg_backend_pid() % 16, sum(d.n)
    FROM (SELECT broadcast_id, 'total' AS state, 1 AS n FROM new_jobs
          UNION ALL
          SELECT broadcast_id, senddock_count_state(status, failure), 1 FROM new_jobs
          WHERE status NOT IN ('pending', 'sending')) d
    GROUP BY d.broadcast_id, d.state
    ORDER BY d.broadcast_id, d.state
    ON CONFLICT (broadcast_id, state, slot) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.senddock_count_state(status text, failure text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN status IN ('pending', 'sending') THEN NULL
                WHEN status = 'failed' THEN 'failed:' || coalesce(failure, '')
                ELSE status END
$function$;

CREATE OR REPLACE FUNCTION public.senddock_count_updated_jobs()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_jobs WHERE status NOT IN ('pending', 'sending'))
       AND NOT EXISTS (SELECT 1 FROM old_jobs WHERE status NOT IN ('pending', 'sending')) THEN
        RETURN NULL;
    END IF;
    INSERT INTO broadcast_counts AS c (broadcast_id, state, slot, n)
    SELECT d.broadcast_id, d.state, pg_backend_pid() % 16, sum(d.n)
    FROM (SELECT broadcast_id, senddock_count_state(status, failure) AS state, 1 AS n
          FROM new_jobs WHERE status NOT IN ('pending', 'sending')
          UNION ALL
          SELECT broadcast_id, senddock_count_state(status, failure), -1 FROM old_jobs
          WHERE status NOT IN ('pending', 'sending')) d
    GROUP BY d.broadcast_id, d.state
    HAVING sum(d.n) <> 0
    ORDER BY d.broadcast_id, d.state
    ON CONFLICT (broadcast_id, state, slot) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.senddock_heartbeat_age(heartbeat timestamp with time zone)
 RETURNS double precision
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    SELECT extract(epoch FROM now() - greatest(heartbeat, pg_postmaster_start_time()))::float8
$function$;

CREATE OR REPLACE FUNCTION public.senddock_resuppress_erased()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM erased_suppressions) THEN
        RETURN NULL;
    END IF;
    INSERT INTO suppressions (email, reason, detail)
    SELECT n.email, 'manual', 'erased on request earlier; asked never to be mailed again'
    FROM written n
    JOIN erased_suppressions d ON d.digest = sha256(convert_to(lower(n.email), 'UTF8'))
    ON CONFLICT ((lower(email))) DO NOTHING;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.senddock_subscriber_delete_guard()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_advisory_xact_lock(1397048900, 1);
    IF EXISTS (SELECT 1 FROM broadcast_jobs WHERE subscriber_id = OLD.id) THEN
        RAISE EXCEPTION 'subscriber % has delivery history (broadcast_jobs)', OLD.id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN OLD;
END $function$;

CREATE OR REPLACE FUNCTION public.senddock_unfinished(broadcast bigint)
 RETURNS bigint
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    SELECT coalesce(sum(k.n * senddock_unfinished_weight(k.state)), 0)::bigint
    FROM broadcast_counts k WHERE k.broadcast_id = broadcast
$function$;

CREATE OR REPLACE FUNCTION public.senddock_unfinished_weight(state text)
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT CASE WHEN state = 'total' THEN 1
                WHEN state IN ('sent', 'cancelled') OR state LIKE 'failed:%' THEN -1
                ELSE 0 END
$function$;
