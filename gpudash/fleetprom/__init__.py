"""The fleet through Prometheus: the few aggregated queries of a refresh, their answers as
one immutable row per host, and how a row becomes the SSH name that opens the host.

``client`` asks Prometheus (bounded, typed errors); ``queries`` are what is asked;
``rows`` turns the answers into ``PromHost`` rows (pure); ``sshname`` maps a row's labels
to an SSH name; ``fleet`` refreshes, keeps the last good rows and backs off. Nothing here
knows of Textual: the CLI prints the rows as JSON, the dashboard draws them.
"""
