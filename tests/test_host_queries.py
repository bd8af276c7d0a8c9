# ruff: noqa: E501 - systemctl show lines are quoted verbatim
"""What the swap asks a real host besides samples: the ready URL (a GET made on the host),
its model-server units, a unit's journal. The GET is made by a real process over the
local transport against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from gpudash.engine.goals import Ready
from gpudash.serving import modelservers
from gpudash.transport.hostsource import loopback_url
from gpudash.transport.local import LocalSource


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200 if self.path == "/health" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("python", ["py", None], ids=["python", "shell-curl"])
async def test_ready_url_is_asked_on_the_host(server: int, python: str | None) -> None:
    import sys
    source = LocalSource(python=sys.executable if python else None)
    try:
        control = source.control
        ok = await control.probe_http(f"http://127.0.0.1:{server}/health", 3)  # type: ignore[attr-defined]
        assert (ok.status, ok.error) == (200, None)
        busy = await control.probe_http(f"http://127.0.0.1:{server}/other", 3)  # type: ignore[attr-defined]
        assert busy.status == 503
        down = await control.probe_http(f"http://127.0.0.1:{_closed_port()}/health", 3)  # type: ignore[attr-defined]
        assert down.status is None and down.error
        goal = Ready(f"http://127.0.0.1:{server}/health")
        await goal.observe(control)
        assert goal.status == 200  # the engine's goal reads the real transport's answer
    finally:
        await source.close()


@pytest.mark.parametrize("url", ["http://gpu01.invalid:8000/health", "https://127.0.0.1/h",
                                 "http://127.0.0.1:8000/a b", "file:///etc/passwd"])
def test_only_loopback_http_is_ever_asked(url: str) -> None:
    with pytest.raises(ValueError):
        loopback_url(url)


SHOW = """Id=vllm-kimi-k25.service
Description=vLLM - Kimi
ActiveState=inactive
UnitFileState=disabled
Restart=always
ExecStart={ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model K --port 8001 ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }

Id=sglang@kimi\\x2dk2.service
Description=SGLang
ActiveState=active
UnitFileState=
Restart=no
ExecStart={ path=/opt/sg/bin/python ; argv[]=/opt/sg/bin/python -m sglang.launch_server --model-path m ; ignore_errors=no }

Id=llama.service
ActiveState=active
UnitFileState=enabled
Restart=no
ExecStart={ path=/usr/local/bin/llama-server ; argv[]=/usr/local/bin/llama-server -m x.gguf --port=9000 ; ignore_errors=no }

Id=cron.service
ActiveState=active
UnitFileState=enabled
ExecStart={ path=/usr/sbin/cron ; argv[]=/usr/sbin/cron -f ; ignore_errors=no }

Id=my-model.service
ActiveState=inactive
UnitFileState=enabled
ExecStart={ path=/srv/run.sh ; argv[]=/srv/run.sh ; ignore_errors=no }
"""


def test_model_units_known_servers_ports_and_globs() -> None:
    units = modelservers.model_units(modelservers.parse_show(SHOW), ["my-*"])
    got = {u.name: (u.kind, u.port, u.active_state, u.unit_file_state, u.restart)
           for u in units}
    assert got == {
        "vllm-kimi-k25.service": ("vllm", 8001, "inactive", "disabled", "always"),
        "sglang@kimi\\x2dk2.service": ("sglang", 30000, "active", "", "no"),
        "llama.service": ("llama.cpp", 9000, "active", "enabled", "no"),
        "my-model.service": ("config", None, "inactive", "enabled", None),
    }
    assert "cron.service" not in got
    assert modelservers.server_kind("/usr/bin/vllm serve moonshotai/Kimi --port 8001") == "vllm"
    assert modelservers.server_kind("ollama serve") == "ollama"
    assert modelservers.server_kind("/usr/bin/text-generation-launcher --port 80") == "tgi"
    assert modelservers.server_kind("/bin/echo vllm") is None


def test_unit_names_skip_template_files() -> None:
    names = modelservers.unit_names(
        "vllm@kimi.service loaded active running vLLM\n",
        "vllm@.service disabled enabled\nvllm-kimi-k25.service disabled enabled\n")
    assert names == ["vllm@kimi.service", "vllm-kimi-k25.service"]


def test_journal_records_carry_message_time_and_cursor() -> None:
    from gpudash.transport.loglines import journal_line

    line = journal_line(b'{"MESSAGE":"Loading safetensors checkpoint shards:  37% Completed",'
                        b'"__REALTIME_TIMESTAMP":"1764572400000000","__CURSOR":"s=ab;i=1f"}\n',
                        "u.service")
    assert line is not None and line.message.startswith("Loading safetensors")
    assert line.time == 1764572400.0 and line.cursor == "s=ab;i=1f"
    raw = journal_line(b'{"MESSAGE":[27,91,51,49,109,255],"__CURSOR":"x; rm -rf /"}', "u")
    assert raw is not None and raw.message == "\x1b[31m\ufffd"  # kept literal; shown cleaned
    assert raw.cursor is None  # not a cursor journalctl would give: never passed back
    assert journal_line(b"-- No entries --\n", "u") is None


async def test_the_collector_asks_and_follows_no_redirect() -> None:
    """A 3xx is the answer: the collector never follows it (elsewhere could be anywhere)."""
    import sys

    hits: list[str] = []

    class Target(_Health):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            super().do_GET()

    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Target)
    tport = target.server_address[1]

    class Redirect(_Health):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{tport}/health")
            self.end_headers()

    moved = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    for srv in (target, moved):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    source = LocalSource(python=sys.executable)
    try:
        answer = await source.control.probe_http(  # type: ignore[attr-defined]
            f"http://127.0.0.1:{moved.server_address[1]}/health", 3)
        assert (answer.status, hits) == (302, [])
        collector = await source.collector()
        assert await collector.http_get("http://gpu01.invalid:8000/health", 1) == (  # type: ignore[attr-defined]
            None, "not a loopback http URL")  # refused on the host too, never asked
    finally:
        await source.close()
        for srv in (target, moved):
            srv.shutdown()
            srv.server_close()
