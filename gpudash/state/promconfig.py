"""The ``[prometheus]`` table of ``config.toml``: where the fleet's Prometheus is and how
to authenticate to it, its keys named as Prometheus' own HTTP client config names them::

    [prometheus]
    url = "https://prometheus.example:9090"   # --prometheus without a URL uses it
    bearer_token_file = "/etc/gpudash/prometheus.token"  # or [prometheus.authorization]
    ssh_name = "{instance|noport}"            # how a row becomes the SSH name Enter opens
    timeout = 10.0                            # seconds per query (1 to 300)

    [prometheus.authorization]                # the same as bearer_token_file
    type = "Bearer"
    credentials_file = "/etc/gpudash/prometheus.token"

    [prometheus.basic_auth]
    username = "gpudash"
    password_file = "/etc/gpudash/prometheus.password"

    [prometheus.tls_config]
    ca_file = "/etc/gpudash/prometheus-ca.crt"
    cert_file = "/etc/gpudash/client.crt"     # a client certificate (mutual TLS) ...
    key_file = "/etc/gpudash/client.key"      # ... and its key
    insecure_skip_verify = false

Secrets are read from their files at every refresh (a rotated token is used at once),
never written in this file: ``password``, ``credentials`` and ``bearer_token`` are refused
with that reason. A key gpudash does not honour (``server_name``, ``proxy_url``, ...) is
refused by name rather than ignored: a table that is half read would authenticate or
verify differently from what it says.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpudash.record import record

DEFAULT_SSH_NAME = "{instance|noport}"
DEFAULT_TIMEOUT = 10.0
TIMEOUT_RANGE = (1.0, 300.0)
# {label} or {label|noport}: what a row's SSH name is made of (checked here, applied by
# gpudash.fleetprom.sshname)
TEMPLATE_PART = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(\|noport)?\}")
_SECRETS = {"password": "password_file", "credentials": "credentials_file",
            "bearer_token": "bearer_token_file"}


@record
class PromSettings:
    """How to reach the fleet's Prometheus (every field optional but where it is used)."""

    url: str | None = None
    bearer_token_file: Path | None = None
    basic_auth_username: str | None = None
    basic_auth_password_file: Path | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure_skip_verify: bool = False
    ssh_name: str = DEFAULT_SSH_NAME
    timeout: float = DEFAULT_TIMEOUT


class PromSettingsError(ValueError):
    """The table cannot be used as it is; the message names the key."""


def check_url(text: str) -> str:
    """``text`` if it is a Prometheus base URL gpudash can use, else ValueError saying why."""
    parts = urllib.parse.urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {text[:200]!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in the URL would be shown and logged: use "
                         "[prometheus.basic_auth] in config.toml")
    if parts.query or parts.fragment:
        raise ValueError(f"a Prometheus base URL has no query or fragment: {text[:200]!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ValueError(f"{text[:200]!r}: {exc}") from None
    return text.strip().rstrip("/")


def check_template(text: str) -> str:
    """``text`` if it is an SSH name template: literal text and ``{label}`` or
    ``{label|noport}`` parts, at least one."""
    if not TEMPLATE_PART.search(text) or "{" in TEMPLATE_PART.sub("", text) or (
            "}" in TEMPLATE_PART.sub("", text)):
        raise ValueError(f"expected a template of labels like {DEFAULT_SSH_NAME!r}, "
                         f"not {text[:200]!r}")
    return text


def _path(table: dict[str, object], key: str, where: str) -> Path | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 4096:
        raise PromSettingsError(f"{where}{key}: expected a file path")
    return Path(value).expanduser()


def _only(table: object, keys: set[str], where: str) -> dict[str, object]:
    if not isinstance(table, dict):
        raise PromSettingsError(f"{where.rstrip('.')}: expected a table")
    for key in table:
        if key in _SECRETS:
            raise PromSettingsError(f"{where}{key}: secrets are not kept in config.toml: "
                                    f"use {_SECRETS[key]}")
        if key not in keys:
            raise PromSettingsError(f"{where}{key}: not a key gpudash honours (it has: "
                                    f"{', '.join(sorted(keys))})")
    return table


def _token_file(table: dict[str, object]) -> Path | None:
    token = _path(table, "bearer_token_file", "")
    if "authorization" in table:
        auth = _only(table["authorization"], {"type", "credentials_file"}, "authorization.")
        if auth.get("type", "Bearer") != "Bearer":
            raise PromSettingsError("authorization.type: only Bearer is supported")
        if token is not None:
            raise PromSettingsError("bearer_token_file and authorization: give one")
        token = _path(auth, "credentials_file", "authorization.")
        if token is None:
            raise PromSettingsError("authorization.credentials_file: missing")
    return token


def _basic_auth(value: object, kw: dict[str, Any]) -> None:
    basic = _only(value, {"username", "password_file"}, "basic_auth.")
    user = basic.get("username")
    if not isinstance(user, str) or not user or ":" in user or len(user) > 256:
        raise PromSettingsError("basic_auth.username: expected a name without ':'")
    if kw["bearer_token_file"] is not None:
        raise PromSettingsError("basic_auth and a bearer token: give one")
    kw["basic_auth_username"] = user
    kw["basic_auth_password_file"] = _path(basic, "password_file", "basic_auth.")


def _tls(value: object, kw: dict[str, Any]) -> None:
    tls = _only(value, {"ca_file", "cert_file", "key_file", "insecure_skip_verify"},
                "tls_config.")
    for key in ("ca_file", "cert_file", "key_file"):
        kw[key] = _path(tls, key, "tls_config.")
    if (kw["cert_file"] is None) != (kw["key_file"] is None):
        raise PromSettingsError("tls_config: cert_file and key_file go together")
    skip = tls.get("insecure_skip_verify", False)
    if not isinstance(skip, bool):
        raise PromSettingsError("tls_config.insecure_skip_verify: expected true or false")
    kw["insecure_skip_verify"] = skip


def _text_key(table: dict[str, object], key: str, check: Callable[[str], str],
              kw: dict[str, Any]) -> None:
    if key in table:
        value = table[key]
        if not isinstance(value, str):
            raise PromSettingsError(f"{key}: expected text")
        try:
            kw[key] = check(value)
        except ValueError as exc:
            raise PromSettingsError(f"{key}: {exc}") from None


def parse_table(value: object) -> PromSettings:
    """The ``[prometheus]`` table as settings, or PromSettingsError naming the first bad key."""
    table = _only(value, {"url", "bearer_token_file", "authorization", "basic_auth",
                          "tls_config", "ssh_name", "timeout"}, "")
    kw: dict[str, Any] = {"bearer_token_file": _token_file(table)}
    _text_key(table, "url", check_url, kw)
    _text_key(table, "ssh_name", check_template, kw)
    if "basic_auth" in table:
        _basic_auth(table["basic_auth"], kw)
    if "tls_config" in table:
        _tls(table["tls_config"], kw)
    if "timeout" in table:
        t = table["timeout"]
        low, high = TIMEOUT_RANGE
        if (isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t)
                or not low <= t <= high):
            raise PromSettingsError(f"timeout: expected seconds from {low:g} to {high:g}")
        kw["timeout"] = float(t)
    return replace(PromSettings(), **kw)
