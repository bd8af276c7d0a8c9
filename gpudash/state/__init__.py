"""The operator machine's own files: where they live (``paths``), the settings
(``config``), learned footprints (``footprints``) and the log (``logfile``)."""
