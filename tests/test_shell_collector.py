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

from gpudash.collector import shell
from gpudash.model import SourceKind
from gpudash.source import ProtocolError

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
