"""``--web.config.file``: TLS and basic auth for ``gpudash exporter``, in the format the
Prometheus exporters share (the exporter-toolkit's, as node_exporter reads it)::

    tls_server_config:
      cert_file: /etc/gpudash/exporter.crt   # relative paths: from the file's directory
      key_file: /etc/gpudash/exporter.key
      client_ca_file: /etc/gpudash/ca.crt    # with client_auth_type:
      client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven
      min_version: TLS12                     # TLS10 .. TLS13; max_version too
    http_server_config:
      headers: {X-Frame-Options: deny}       # added to every answer
    basic_auth_users:
      prometheus: $2y$10$...                 # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\\n')

A file with neither ``tls_server_config`` nor ``basic_auth_users`` secures nothing: it
does not count as one where ``--listen`` is off loopback (``WebConfig.secures``). The
file and the files it names are followed while the exporter runs (``gpudash.cli.webreload``).

What the toolkit has and gpudash cannot honour (cipher_suites, curve_preferences,
client_allowed_sans, RequestClientCert, ...) is refused by name, never silently ignored;
``http2`` is accepted and has no effect (gpudash serves HTTP/1.1).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from gpudash.record import record

BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")
BCRYPT_COSTS = range(4, 32)  # what bcrypt computes (2^4 .. 2^31 rounds)
DEFAULT_COST = 10  # of the hash an unknown user is checked against when no user is set
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version",
            "max_version"}
UNSUPPORTED = {"cipher_suites", "curve_preferences", "prefer_server_cipher_suites",
               "client_allowed_sans", "cert", "key"}
# headers the server itself sets: a config must not replace them
OWN_HEADERS = {"content-type", "content-length", "connection", "www-authenticate"}


class WebConfigError(ValueError):
    """The file cannot be used; the message names the file and the key."""


@record
class WebConfig:
    path: Path
    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    files: tuple[Path, ...] = ()  # the certificate, key and CA files it names
    # an unknown user's password is checked against this, as costly as the costliest user
    # (the same time as a known user's: no telling who exists by timing); nothing passes it
    dummy: bytes = b""

    def __post_init__(self) -> None:
        if not self.dummy:
            object.__setattr__(self, "dummy", dummy_hash(self.users.values()))

    @property
    def secures(self) -> bool:
        """Whether it asks anything of a client (TLS or a password): a file of headers
        only, or an empty one, serves plain HTTP to anyone, as no file at all does."""
        return self.tls is not None or bool(self.users)

    @property
    def describe(self) -> str:
        parts = ["TLS" if self.tls is not None else "plain HTTP"]
        if self.users:
            parts.append(f"basic auth ({len(self.users)} user(s))")
        return ", ".join(parts)


def load(path: Path) -> WebConfig:
    """Read and check the whole file (the certificate and key are loaded now)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{path}: not YAML: {exc}") from None
    except RecursionError:
        raise WebConfigError(f"{path}: not YAML: nested too deep") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise WebConfigError(f"{path}: expected a mapping of settings")
    unknown = set(data) - {"tls_server_config", "http_server_config", "basic_auth_users"}
    if unknown:
        raise WebConfigError(f"{path}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    tls: ssl.SSLContext | None = None
    named: tuple[Path, ...] = ()
    if (tls_conf := data.get("tls_server_config")) is not None:
        tls, named = _tls(path, _mapping(path, "tls_server_config", tls_conf))
    return WebConfig(path, tls=tls, users=_users(path, data.get("basic_auth_users")),
                     headers=_headers(path, data.get("http_server_config")),
                     files=named)


def dummy_hash(hashes: Iterable[bytes]) -> bytes:
    """A bcrypt hash at the highest cost among ``hashes``, with a random salt and a
    checksum no password gives: checking one costs what a real check costs (the cost is
    in the computing, the checksum only compared), and making it costs nothing."""
    cost = max((int(h[4:6]) for h in hashes), default=DEFAULT_COST)
    return bcrypt.gensalt(rounds=cost, prefix=b"2b") + b"." * 31


def _mapping(path: Path, key: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WebConfigError(f"{path}: {key}: expected a mapping")
    return value


def _tls(path: Path, conf: dict[str, Any]) -> tuple[ssl.SSLContext, tuple[Path, ...]]:
    """The server's TLS context, and the files it was loaded from."""
    where = "tls_server_config"
    refused = set(conf) & UNSUPPORTED
    if refused:
        raise WebConfigError(f"{path}: {where}: {', '.join(sorted(refused))}: not supported "
                             "by gpudash (use cert_file/key_file)")
    unknown = set(conf) - TLS_KEYS
    if unknown:
        raise WebConfigError(f"{path}: {where}: unknown key(s) {', '.join(sorted(unknown))}")
    for key in ("cert_file", "key_file"):
        if not isinstance(conf.get(key), str) or not conf[key]:
            raise WebConfigError(f"{path}: {where}: {key} is required")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _version(path, conf, "min_version", ssl.TLSVersion.TLSv1_2)
    ctx.maximum_version = _version(path, conf, "max_version", ssl.TLSVersion.TLSv1_3)
    named: tuple[Path, ...] = (_file(path, conf["cert_file"]), _file(path, conf["key_file"]))
    try:
        ctx.load_cert_chain(named[0], named[1])
    except (OSError, ssl.SSLError) as exc:
        raise WebConfigError(f"{path}: {where}: certificate or key not loaded: {exc}") from None
    auth = conf.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"{path}: {where}: client_auth_type {auth!r}: one of "
                             f"{', '.join(CLIENT_AUTH)}")
    ca = conf.get("client_ca_file")
    if CLIENT_AUTH[auth] != ssl.CERT_NONE:
        if not isinstance(ca, str) or not ca:
            raise WebConfigError(f"{path}: {where}: {auth} needs client_ca_file")
        named += (_file(path, ca),)
        try:
            ctx.load_verify_locations(named[-1])
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"{path}: {where}: client_ca_file not loaded: {exc}") from None
    elif ca is not None:
        raise WebConfigError(f"{path}: {where}: client_ca_file without a client_auth_type "
                             "that verifies (RequireAndVerifyClientCert)")
    ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx, named


def _version(path: Path, conf: dict[str, Any], key: str, default: ssl.TLSVersion
             ) -> ssl.TLSVersion:
    value = conf.get(key)
    if value is None:
        return default
    if value not in TLS_VERSIONS:
        raise WebConfigError(f"{path}: tls_server_config: {key} {value!r}: one of "
                             f"{', '.join(TLS_VERSIONS)}")
    return TLS_VERSIONS[value]


def _file(path: Path, name: str) -> Path:
    target = Path(name).expanduser()
    return target if target.is_absolute() else path.parent / target


def _users(path: Path, users: object) -> dict[str, bytes]:
    if users is None:
        return {}
    out: dict[str, bytes] = {}
    for user, hashed in _mapping(path, "basic_auth_users", users).items():
        if not user or ":" in user or not user.isprintable():
            raise WebConfigError(f"{path}: basic_auth_users: {user!r} is not a user name")
        if not isinstance(hashed, str) or not (valid := BCRYPT.fullmatch(hashed)):
            raise WebConfigError(f"{path}: basic_auth_users: {user}: not a bcrypt hash "
                                 "($2y$..., e.g. from htpasswd -nBC 10)")
        if int(valid.group(1)) not in BCRYPT_COSTS:
            raise WebConfigError(f"{path}: basic_auth_users: {user}: cost {valid.group(1)}: "
                                 f"bcrypt's is {BCRYPT_COSTS.start} to {BCRYPT_COSTS.stop - 1}")
        out[user] = hashed.encode("ascii")
    return out


def _headers(path: Path, conf: object) -> tuple[tuple[str, str], ...]:
    if conf is None:
        return ()
    server = _mapping(path, "http_server_config", conf)
    unknown = set(server) - {"headers", "http2"}
    if unknown:
        raise WebConfigError(f"{path}: http_server_config: unknown key(s) "
                             f"{', '.join(sorted(unknown))}")
    if not isinstance(server.get("http2", True), bool):
        raise WebConfigError(f"{path}: http_server_config: http2 must be true or false")
    headers = server.get("headers") or {}
    out = []
    for name, value in _mapping(path, "http_server_config.headers", headers).items():
        if (not HEADER_NAME.fullmatch(name) or name.lower() in OWN_HEADERS
                or not isinstance(value, str) or not value.isprintable() or len(value) > 1024):
            raise WebConfigError(f"{path}: http_server_config.headers: {name!r} cannot be set")
        out.append((name, value))
    return tuple(out)
