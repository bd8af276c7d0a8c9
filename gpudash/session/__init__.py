"""An action from confirmation to its audited outcome, for any front end (``controller``),
and the audit trail it writes (``audit``)."""
