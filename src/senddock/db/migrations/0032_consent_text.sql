-- Issue 35.5: the text a person agreed to is part of their consent (GDPR article 7: the
-- controller must be able to show what the person consented to). A list may word its sign-up
-- consent (`lists set NAME --consent-text`); NULL: the default wording (audience/signup.py,
-- DEFAULT_CONSENT). Each sign-up keeps the wording of its moment, so a later change of the
-- list's wording never rewrites what an earlier subscriber agreed to. Rows from before this
-- migration hold '' (the wording of their moment was not kept).
ALTER TABLE lists ADD COLUMN consent_text text
    CHECK (consent_text IS NULL OR length(consent_text) BETWEEN 1 AND 2000);
ALTER TABLE signup_consents ADD COLUMN consent_text text NOT NULL DEFAULT '';
