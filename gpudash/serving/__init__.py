"""What gpudash knows of model servers: which units are model servers and on which port
(``modelservers``), and what their logs say (``logsigns``: loading progress, failures)."""
