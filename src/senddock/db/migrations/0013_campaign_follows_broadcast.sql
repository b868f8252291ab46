-- 0013: a campaign's status is derived from its broadcast's, in one place (issue 20).
-- `campaigns.status` mirrors `broadcasts.status` once the campaign has a broadcast; until now
-- every statement that moved a broadcast (send, pause, resume, cancel, finish, the pause for
-- replies about us, retry-failed's reopen) also updated the campaign by hand. From here the
-- queue layer (senddock/queue/jobs.sql) writes the broadcast only, and this trigger writes its
-- campaign in the same statement, so the two can never disagree. A draft (no broadcast yet) is
-- the only campaign whose status is written directly: draft, and cancelled from draft.

-- broadcast status -> campaign status
CREATE FUNCTION campaign_status_of(broadcast_status text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT CASE broadcast_status
        WHEN 'running' THEN 'sending'
        WHEN 'paused' THEN 'paused'
        WHEN 'finished' THEN 'sent'
        WHEN 'cancelled' THEN 'cancelled'
    END
$$;

CREATE FUNCTION campaign_follows_broadcast() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status IS NOT DISTINCT FROM OLD.status THEN
        RETURN NULL;
    END IF;
    UPDATE campaigns SET status = campaign_status_of(NEW.status), updated_at = now()
    WHERE id = NEW.campaign_id;
    RETURN NULL;
END
$$;

-- Fires only for statements that set broadcasts.status (not for `total` or counters).
CREATE TRIGGER campaign_follows_broadcast
    AFTER INSERT OR UPDATE OF status ON broadcasts
    FOR EACH ROW EXECUTE FUNCTION campaign_follows_broadcast();

-- Campaigns written by hand before this migration follow their broadcast from now on.
UPDATE campaigns c SET status = campaign_status_of(b.status), updated_at = now()
FROM broadcasts b
WHERE b.campaign_id = c.id AND c.status IS DISTINCT FROM campaign_status_of(b.status);
