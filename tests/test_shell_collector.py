"""The plain-shell fallback collector: host text can never be read as its framing."""
# ruff: noqa: F811  (fixtures imported from sshd.fixture are redefined as parameters)

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sshd.fixture import (  # noqa: F401
    SshdServer,
    first,
    gpus,
    ssh_source,
    sshd_fakegpu,
    sshd_server,
)

from gpudash.domain.model import SourceKind
from gpudash.protocol import shell
from gpudash.protocol.source import ProtocolError

# Each would end a section or start a frame if the script printed host text as is.
FORGED_COMMS = ["\n@frame 1\n", "x\n@end\n|y", "\n@apps\n@gpus"]


def linked_binary(tmp_path: Path, real: str, comm: str) -> str:
    """A link to ``real`` named ``comm``: exec through it and the kernel's comm is that."""
    d = tmp_path / f"bin{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    link = d / comm
    os.symlink(real, link)
    return str(link)


@pytest.mark.ssh
async def test_process_name_with_newlines_cannot_forge_frames(
    sshd_server: SshdServer, gpus, tmp_path: Path
) -> None:
    binary = gpus.env["FAKEGPU_BIN"]
    hidden = [
        gpus.hold(i, 20000, "big", binary=linked_binary(tmp_path, binary, comm))
        for i, comm in enumerate(FORGED_COMMS)
    ]
    source = ssh_source(sshd_server, python="python3-not-installed")
    try:
        snaps = [await first(source.stream(0.3), 2), await source.control.sample()]
    finally:
        await source.close()
    for snap in snaps:
        assert snap.source is SourceKind.SHELL
        assert len(snap.gpus) == 4
        assert [snap.gpu(i).memory_used_mib for i in range(3)] == [20000] * 3  # type: ignore[union-attr]
        for i, (holder, comm) in enumerate(zip(hidden, FORGED_COMMS, strict=True)):
            proc = snap.process(holder.pid)
            assert proc is not None, f"holder {comm!r} hidden"
            assert proc.name == comm and dict(proc.gpu_memory_mib) == {i: 20000}
            assert proc.start_ticks is not None


def test_frame_lines_are_markers_or_quoted_host_text() -> None:
    good = ["@frame 5", "@gpus", "|0, GPU-a, H100, 100, 5, 0, 30, 1.0, 2.0", "@end"]
    assert shell.parse_frame(good)["gpus"]["0"]["memory_used_mib"] == 5
    for bad in (
        ["@frame 5", "@gpus", "0, GPU-a, H100, 100, 5, 0, 30, 1.0, 2.0", "@end"],  # unquoted
        ["@frame 5", "@bogus", "@end"],  # unknown marker
        ["@frame 5", "|x"],  # no end
    ):
        with pytest.raises(ProtocolError):
            shell.parse_frame(bad)


def test_a_frame_is_bounded_in_bytes_not_only_in_lines() -> None:
    # a compromised host without python3 (or pretending): lines up to the line limit,
    # never an @end, must not make gpudash hold 200,000 of them
    reader = shell.FrameReader()
    reader.feed("@frame 5")
    reader.feed("@units")
    line = "|" + "x" * (1 << 20)
    with pytest.raises(ProtocolError, match="frame too long"):
        for _ in range(shell.MAX_FRAME_LINES):
            reader.feed(line)
    assert sum(map(len, reader.lines)) <= shell.MAX_FRAME_BYTES + len(line)


@pytest.mark.parametrize("frame", [
    ["@frame 5", "@apps", "|GPU-a, 1, x, 5", "@stat " + "9" * 5000, "|x", "@end"],
    ["@frame 5", "@btime " + "9" * 5000 + " 100", "@end"],
    ["@frame " + "9" * 5000, "@end"],
    ["@frame 5", "@apps", "|GPU-a, " + "9" * 5000 + ", x, 5", "@end"],
])
def test_absurd_numbers_in_a_frame_are_a_protocol_error(frame: list[str]) -> None:
    try:
        state = shell.parse_frame(frame)
    except ProtocolError:
        return
    from gpudash.protocol.wire import to_snapshot

    with pytest.raises(ProtocolError):  # decodes, or is refused as a whole: never a crash
        to_snapshot(state, "h", source=SourceKind.SHELL, degraded=True)
        raise ProtocolError("decoded")


def test_the_script_caps_each_command_line_it_sends(gpus) -> None:  # type: ignore[no-untyped-def]
    # One GPU user's 100 KiB command lines would otherwise fill the frame: enough of
    # them and it is refused as too long, and the host drops out of view.
    import subprocess

    long_name = "x" * 100_000
    holder = gpus.hold(0, 1000, long_name)
    done = subprocess.run(
        ["sh", "-c", shell.STREAM_SCRIPT, "sh", "1", "1"],
        env=gpus.env, capture_output=True, text=True, errors="replace", timeout=60,
    )
    lines = done.stdout.splitlines()
    at = lines.index(f"@cmdline {holder.pid}")
    assert lines[at + 1].startswith("|xxxx")
    assert len(lines[at + 1]) <= shell.CMDLINE_BYTES + 1
    # and what the decoder makes of it says it was cut
    from gpudash.collector.host.protocol import TRUNCATED
    from gpudash.protocol.wire import to_snapshot

    frame = lines[lines.index(next(x for x in lines if x.startswith("@frame"))):]
    snap = to_snapshot(shell.parse_frame(frame[: frame.index("@end") + 1]), "h")
    proc = snap.process(holder.pid)
    assert proc is not None and proc.cmdline.endswith(TRUNCATED)
