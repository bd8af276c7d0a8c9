"""A flood of scrapers with a wrong password, as its own process: ``CLIENTS`` real TLS
connections to ``https://127.0.0.1:PORT/metrics`` at once, each asking again as soon as
it is answered (or dropped), for ``SECONDS``. Says ``flooding`` once every client has
sent its first request, and at the end what they got, as one JSON line.

    python tests/exporter_flood.py PORT CLIENTS SECONDS
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
from collections import Counter

REQUEST = (b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic "
           + base64.b64encode(b"prometheus:not-the-password") + b"\r\n\r\n")


async def client(port: int, tls: ssl.SSLContext, until: float, seen: Counter[str],
                 sent: asyncio.Queue[None]) -> None:
    loop = asyncio.get_running_loop()
    first = True
    while loop.time() < until:
        try:
            async with asyncio.timeout(max(0.1, until - loop.time())):
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
                try:
                    writer.write(REQUEST)
                    await writer.drain()
                    if first:
                        first = False
                        sent.put_nowait(None)
                    answer = await reader.read()
                finally:
                    writer.transport.abort()
            seen[answer[9:12].decode() or "closed"] += 1
        except TimeoutError:
            seen["waiting"] += 1
        except (OSError, ssl.SSLError, EOFError):
            seen["reset"] += 1


async def main(port: int, clients: int, seconds: float) -> None:
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE  # the flood does not care whom it floods
    seen: Counter[str] = Counter()
    sent: asyncio.Queue[None] = asyncio.Queue()
    until = asyncio.get_running_loop().time() + seconds
    flood = asyncio.gather(*(client(port, tls, until, seen, sent) for _ in range(clients)))
    for _ in range(clients):
        await sent.get()
    print("flooding", flush=True)  # every client has sent its first request
    await flood
    print(json.dumps(dict(seen)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
