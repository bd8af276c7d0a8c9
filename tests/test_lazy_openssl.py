"""OpenSSL is loaded where it is used, not because asyncio (or hashlib) was imported
(gpudash.cli.lazy_openssl): a fresh interpreter, as the CLI starts, then real TLS on
127.0.0.1 through asyncio's own transports, both ends, and a real hash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from test_exporter_hold import make_certificate

from gpudash.cli import lazy_openssl

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import sys
    from gpudash.cli import lazy_openssl
    assert lazy_openssl.defer() == ['ssl', 'asyncio.sslproto', 'hashlib']
    import asyncio
    import asyncio.sslproto
    loaded = sorted(m for m in ("_ssl", "_hashlib") if m in sys.modules)
    print("after asyncio:", loaded or "none")

    async def main(cert, key):
        import ssl
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(cert, key)

        async def echo(reader, writer):
            writer.write(b"tls:" + await reader.readline())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        client_ctx = ssl.create_default_context(cafile=cert)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        writer.write(b"hello\\n")
        print("answer:", (await reader.readline()).decode().strip())
        print("cipher:", writer.get_extra_info("cipher") is not None)
        writer.close()
        untrusted = ssl.create_default_context()
        try:
            await asyncio.open_connection("127.0.0.1", port, ssl=untrusted)
        except ssl.SSLCertVerificationError:
            print("untrusted: refused")
        server.close()
        await server.wait_closed()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    print("sslproto:", asyncio.sslproto.SSLProtocol.__module__)
    import hashlib
    from hashlib import sha256
    print("sha256:", hashlib.sha256(b"gpudash").hexdigest()[:12], sha256 is hashlib.sha256)
""")


def test_asyncio_imports_without_openssl_and_tls_still_works_both_ways(tmp_path: Path
                                                                       ) -> None:
    cert, key = make_certificate(tmp_path)
    cp = subprocess.run([sys.executable, "-c", CHILD, str(cert), str(key)], cwd=ROOT,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == [
        "after asyncio: none",  # without defer(): ['_ssl']
        "answer: tls:hello",
        "cipher: True",
        "untrusted: refused",
        "sslproto: asyncio.sslproto",
        "sha256: 13d1f7f6d657 True",
    ], cp.stdout


def test_nothing_already_imported_is_deferred() -> None:
    import asyncio  # noqa: F401 - pytest's own plugins import it before any test

    before = {name: sys.modules.get(name) for name in lazy_openssl.DEFERRED}
    assert lazy_openssl.defer() == []
    assert {name: sys.modules.get(name) for name in lazy_openssl.DEFERRED} == before


def test_a_python_without_ssl_keeps_asyncio_without_it() -> None:
    """Built without OpenSSL (no ``_ssl``), ``import ssl`` fails and asyncio sets its
    ``ssl`` to None: a placeholder there would fail later, in a socket check."""
    child = textwrap.dedent("""
        import sys
        sys.modules["_ssl"] = None  # as if built without it: import _ssl fails
        from gpudash.cli import lazy_openssl
        print(lazy_openssl.defer())
        import asyncio.base_events
        print(asyncio.base_events.ssl)
    """)
    cp = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["['hashlib']", "None"]
