"""A real OpenSSH sshd on 127.0.0.1 for the transport tests (see fixture.py)."""
