"""How a Prometheus host becomes the SSH name Enter opens: a template over its labels.

``{label}`` is the label's value, ``{label|noport}`` the same without a trailing
``:PORT`` (``[::1]:9835`` gives ``::1``); the rest of the template is literal. The
default, ``{instance|noport}``, is the scrape target's host: right for an exporter on
each GPU host. With one exporter watching several hosts, ``{host}`` is.

Label values are the server's text, untrusted: a name made from them must look like a
host (``user@`` allowed), or the row says why it cannot be opened. It is never given to
a shell: it reaches ``gpudash HOST``'s own path (asyncssh, the ssh config's aliases).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpudash.domain.untrusted import clean
from gpudash.state.promconfig import TEMPLATE_PART, check_template

SSH_NAME = re.compile(r"(?:[A-Za-z0-9._-]{1,64}@)?(?:[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,252})"
                      r"|\[?[0-9A-Fa-f:.]{2,45}\]?)(?::[0-9]{1,5})?")
_PORT = re.compile(r":[0-9]{1,5}$")


def strip_port(instance: str) -> str:
    """``gpu01:9835`` -> ``gpu01``; ``[::1]:9100`` -> ``::1``; a name without a port as it
    is (a bare IPv6 address has colons, not a port)."""
    if instance.startswith("["):
        return instance[1:].split("]", 1)[0]
    if instance.count(":") == 1:
        return _PORT.sub("", instance)
    return instance


class SshNameError(ValueError):
    """No SSH name can be made for this row; the message says why."""


class SshNameTemplate:
    """A compiled ``ssh_name`` template."""

    def __init__(self, text: str) -> None:
        self.text = check_template(text)

    def name(self, labels: Mapping[str, str]) -> str:
        """The SSH name of a row with these labels, or SshNameError."""

        def part(match: re.Match[str]) -> str:
            label, noport = match.group(1), match.group(2)
            value = labels.get(label)
            if not value:
                raise SshNameError(f"no label {label!r} for ssh_name {self.text!r}")
            return strip_port(value) if noport else value

        name = TEMPLATE_PART.sub(part, self.text)
        if not SSH_NAME.fullmatch(name) or name.startswith("-"):
            raise SshNameError(f"not a host name: {clean(name)[:120]!r} (from ssh_name "
                               f"{self.text!r})")
        return name
