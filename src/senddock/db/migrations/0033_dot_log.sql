-- 0033: issue 41. A worker process names its dot log (delivery/dotlog.py): the file, on its own
-- host, in which each of its senders notes the job whose final dot it is about to write. A
-- rescuer on the same host and boot reads it once the worker is dead, so that a job whose mark
-- was committed but whose dot never went goes back to retry instead of waiting, `unconfirmed`,
-- for a person. NULL: the worker keeps none (SENDDOCK_DOT_LOG_DIR=off, or it could not be made).
ALTER TABLE workers ADD COLUMN dot_log text;
