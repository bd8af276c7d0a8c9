"""Following hosts: snapshots kept flowing across dropped links (``reconnect``), and a host
followed for as long as a front end runs (``watch``)."""
