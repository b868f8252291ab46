-- 0029: after a crash, ask the relay where it can tell (issue 41). An unconfirmed job (0016)
-- is settled by a source that can tell: the relay's log (Postfix, Exim), a provider's search
-- API (Mailgun, Postmark, SendGrid), or a provider's delivery event at the webhook intake (SES,
-- Mailgun, SendGrid, Postmark); or by a person, as before. The job keeps how and when: sent
-- (`confirm`) or queued again (`resend_unconfirmed`) with `settled_by` naming the source
-- (`postfix-log`, `mailgun`, `ses-event`, …, `person`). Neither column is in an index, so the
-- hot updates of the send path stay HOT (0017).
ALTER TABLE broadcast_jobs ADD COLUMN settled_by text, ADD COLUMN settled_at timestamptz;

-- What each source said of each job still unconfirmed at its last `campaign reconcile`:
-- `accepted` (it shows the relay took the message), `not accepted` (it covers the job's whole
-- window and never saw it: the job is queued again), `not seen` (a provider's search found
-- nothing, which proves nothing: a person decides) or `cannot tell` (with why). The
-- dashboard shows these beside the jobs a person must still decide. One row a job and source, replaced at each run; a run
-- deletes the rows of its broadcast's jobs that are no longer unconfirmed. No foreign key:
-- retention's deletes of broadcast_jobs stay as cheap as before (a settled job's notes are
-- gone before retention could reach it).
CREATE TABLE reconcile_notes (
    broadcast_id bigint NOT NULL,
    job_id       bigint NOT NULL,
    source       text NOT NULL,
    said         text NOT NULL
                 CHECK (said IN ('accepted', 'not accepted', 'not seen', 'cannot tell')),
    detail       text NOT NULL DEFAULT '',
    noted_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (broadcast_id, job_id, source)
);
