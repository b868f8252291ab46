-- 0019: a finished campaign can be archived out of the default list (issue 22, part 1). It is a
-- column, not a status: the status stays the broadcast's (0013), and archiving changes nothing a
-- worker reads. Additive: older versions ignore the column.
ALTER TABLE campaigns ADD COLUMN archived_at timestamptz;
