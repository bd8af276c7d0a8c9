"""How gpudash and a host talk: the host protocols the front ends and the engine see
(``source``), and the collector's wire format (``wire``, bounded by ``schema``; ``shell``
for hosts without python3; ``payload``, what is sent to start the collector)."""
