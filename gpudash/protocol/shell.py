"""Plain-shell fallback for hosts without ``python3``: nvidia-smi + /proc + systemctl.

The script prints frames of marked sections; this module turns a frame into the same
wire dict the Python collector writes, so one decoder serves both. Snapshots from it
are ``SourceKind.SHELL`` and ``degraded``: holders only, no NVML, no unit members.

Framing: a line that starts with ``@`` is a marker the script itself wrote; every line
of text read from the host (``/proc``, nvidia-smi, systemctl) is quoted with a leading
``|``. A process named ``"\n@end\n"`` therefore arrives as ``|... (``, ``|@end``, ``|) S``
and can never end a section or start a frame; unquoting restores the text exactly.
"""

from __future__ import annotations

import shlex
from dataclasses import field
from typing import Any

from gpudash.collector.host.parsing import (
    cgroup_facts,
    cgroup_path,
    parse_smi_apps,
    parse_smi_gpus,
    parse_stat,
    parse_systemctl_show,
    unit_of_cgroup,
)
from gpudash.collector.host.protocol import (
    BOOT_ID,
    CMDLINE_MAX,
    SMI_APP_FIELDS,
    SMI_GPU_FIELDS,
    UNIT_PROPERTIES,
)
from gpudash.collector.host.text import snapshot_bound
from gpudash.protocol.source import ProtocolError
from gpudash.record import record

# Bytes of a command line the script sends: one past the decoder's limit, so a longer one
# is still cut with its mark, and no user's command lines can fill a frame.
CMDLINE_BYTES = CMDLINE_MAX + 1

STREAM_SCRIPT = (
    r"""
set -f  # unit names from cgroup paths are words, never globs
LC_ALL=C; export LC_ALL  # awk copies bytes, whatever the host's encoding
q() { awk '{ print "|" $0 }'; }  # host text: quoted line by line, never a marker
interval=$1; once=$2
while :; do
  echo "@frame $(date +%s)"
  echo "@btime $(awk '/^btime/{print $2}' /proc/stat) $(getconf CLK_TCK 2>/dev/null || echo 100)"
  echo "@boot"; cat /proc/sys/kernel/random/boot_id 2>/dev/null | q
  pids=
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "@gpus"
    nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits 2>&1 | q
    apps=$(nvidia-smi --query-compute-apps=APP_FIELDS --format=csv,noheader,nounits 2>&1)
    echo "@apps"
    printf '%s\n' "$apps" | q
    pids=$(printf '%s\n' "$apps" | awk -F', *' '$2 ~ /^[0-9]+$/ {print $2}' | sort -u)
  else
    echo "@nosmi"
  fi
  for pid in $pids; do
    echo "@stat $pid"; cat /proc/$pid/stat 2>/dev/null | q
    echo "@user $pid"; stat -c %U /proc/$pid 2>/dev/null | q
    echo "@cmdline $pid"
    head -c CMDLINE_BYTES /proc/$pid/cmdline 2>/dev/null | tr '\000\n' '  ' | q
    echo "@cgroup $pid"; cat /proc/$pid/cgroup 2>/dev/null | q
  done
  if [ -d /run/systemd/system ]; then
    units=$(for pid in $pids; do sed -n 's/^0:://p' /proc/$pid/cgroup 2>/dev/null; done |
      awk -F/ '{for (i = 1; i <= NF; i++) if ($i ~ /\.(service|scope)$/) {print $i; break}}' |
      sort -u)
    echo "@units"
    [ -n "$units" ] && systemctl show --no-pager -p PROPS -- $units 2>/dev/null | q
  else
    echo "@nosystemd"
  fi
  echo "@end"
  [ -n "$once" ] && exit 0
  sleep "$interval" || exit 0
done
""".replace("GPU_FIELDS", SMI_GPU_FIELDS)
    .replace("APP_FIELDS", SMI_APP_FIELDS)
    .replace("PROPS", UNIT_PROPERTIES)
    .replace("CMDLINE_BYTES", str(CMDLINE_BYTES))
)

SIGNAL_SCRIPT = r"""
pid=$1; start=$2; sig=$3; boot=$4
if [ -n "$boot" ]; then  # a (pid, start) identity holds within one boot only
  [ "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" = "$boot" ] || { echo mismatch; exit 0; }
fi
s=$(cat /proc/$pid/stat 2>/dev/null) || { echo gone; exit 0; }
[ -n "$s" ] || { echo gone; exit 0; }
s=${s##*)}
set -- $s
[ "${20}" = "$start" ] || { echo mismatch; exit 0; }
if kill -$sig $pid 2>/dev/null; then echo sent
elif [ -d /proc/$pid ]; then echo denied
else echo gone
fi
"""

_MARKERS = (
    "@frame",
    "@btime",
    "@boot",
    "@gpus",
    "@apps",
    "@nosmi",
    "@stat",
    "@user",
    "@cmdline",
    "@cgroup",
    "@units",
    "@nosystemd",
    "@end",
)


def stream_command(interval: float, *, once: bool = False) -> str:
    """``sh -c`` command line that prints a frame every ``interval`` seconds."""
    return shlex.join(["sh", "-c", STREAM_SCRIPT, "sh", f"{interval:g}", "1" if once else ""])


def signal_command(pid: int, start_ticks: int, sig: int, boot_id: str | None = None) -> str:
    """Signal ``pid`` only if it started at ``start_ticks`` (in boot ``boot_id``, if given)."""
    if boot_id is not None and not BOOT_ID.fullmatch(boot_id):
        raise ValueError(f"not a boot id: {boot_id!r}")
    args = [str(pid), str(start_ticks), str(sig), *([boot_id] if boot_id else [])]
    return shlex.join(["sh", "-c", SIGNAL_SCRIPT, "sh", *args])


MAX_FRAME_LINES = 200_000
# A frame is one snapshot: no more text than the Python collector's largest line.
MAX_FRAME_BYTES = 2 * snapshot_bound()


class FrameReader:
    """Gathers the script's output lines into frames (``@frame`` .. ``@end``)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.size = 0  # characters in ``lines``

    def feed(self, line: str) -> list[str] | None:
        """Take one line (without its newline); a whole frame once it is complete."""
        if not line.startswith(("@", "|")):
            raise ProtocolError("shell collector: a line that is neither marker nor quoted")
        if line.startswith("@frame "):
            self.lines, self.size = [], 0  # a frame starts afresh (one cut short: dropped)
        self.lines.append(line)
        self.size += len(line)
        if line == "@end":
            frame, self.lines, self.size = self.lines, [], 0
            return frame
        if len(self.lines) > MAX_FRAME_LINES or self.size > MAX_FRAME_BYTES:
            raise ProtocolError("shell collector: frame too long")
        return None


def _sections(frame: list[str]) -> list[tuple[str, str, list[str]]]:
    out: list[tuple[str, str, list[str]]] = []
    for line in frame:
        if line.startswith("|"):
            if not out:
                raise ProtocolError("shell collector: host text before any marker")
            out[-1][2].append(line[1:])
            continue
        head, _, arg = line.partition(" ")
        if head not in _MARKERS:
            raise ProtocolError(f"shell collector: unknown line {line[:40]!r}")
        out.append((head, arg, []))
    return out


def parse_frame(frame: list[str]) -> dict[str, Any]:
    """One frame (its lines, ``@frame`` .. ``@end``) as a wire snapshot dict; anything
    it cannot read (a 5000-digit pid included) is a ``ProtocolError``."""
    try:
        return _parse_frame(frame)
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"shell collector: unreadable frame ({exc})"[:200]) from None


def _parse_frame(frame: list[str]) -> dict[str, Any]:
    sections = _sections(frame)
    if not sections or sections[0][0] != "@frame" or sections[-1][0] != "@end":
        raise ProtocolError("shell collector: truncated frame")
    try:
        taken_at = float(sections[0][1])
    except ValueError:
        raise ProtocolError("shell collector: bad frame header") from None
    f = _Frame()
    for head, arg, body in sections:
        text = "\n".join(body)
        if not _parse_host_section(f, head, arg, text) and arg.isdigit() and int(arg) in f.holders:
            pid = int(arg)
            _parse_proc_section(f.procs.setdefault(pid, {"pid": pid}), head, text, f.btime, f.tck)
    errors, gpus, holders, procs, units, boot_id = (
        f.errors, f.gpus, f.holders, f.procs, f.units, f.boot_id)
    for pid, memory in holders.items():
        procs.setdefault(pid, {"pid": pid})["gpu_memory_mib"] = {
            str(k): v for k, v in memory.items()
        }
    state: dict[str, Any] = {
        "taken_at": taken_at,
        "source": "shell",
        "degraded": True,
        "errors": errors + ["no python3 on the host: plain-shell fallback (degraded)"],
        "gpus": {str(g["index"]): g for g in gpus},
        "procs": {str(p): v for p, v in procs.items()},
        "units": {u["name"]: u for u in units},
    }
    if boot_id is not None:
        state["boot_id"] = boot_id
    return state


@record(frozen=False)
class _Frame:
    """What a frame's sections said so far."""

    errors: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    holders: dict[int, dict[int, int]] = field(default_factory=dict)
    procs: dict[int, dict[str, Any]] = field(default_factory=dict)
    units: list[dict[str, Any]] = field(default_factory=list)
    btime: float = 0.0
    tck: int = 100
    boot_id: str | None = None


def _parse_host_section(f: _Frame, head: str, arg: str, text: str) -> bool:
    """One of the host's sections of a frame into ``f``; False for any other section."""
    if head == "@btime":
        parts = arg.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0].isdigit():
            f.btime, f.tck = float(parts[0]), int(parts[1]) or 100
    elif head == "@boot":
        f.boot_id = text.strip() if BOOT_ID.fullmatch(text.strip()) else None
    elif head == "@gpus":
        if "No devices were found" in text:
            f.errors.append("nvidia-smi: No devices were found")
        else:
            f.gpus, errs = parse_smi_gpus(text)
            f.errors += errs
    elif head == "@apps":
        index_of = {g["uuid"]: g["index"] for g in f.gpus if "uuid" in g}
        f.holders, errs = parse_smi_apps(text, index_of)
        f.errors += [e for e in errs if "No devices" not in e]
    elif head == "@nosmi":
        f.errors.append("no NVIDIA driver: nvidia-smi not found (and no python3 for NVML)")
    elif head == "@nosystemd":
        f.errors.append("host is not running systemd: units unknown")
    elif head == "@units":
        f.units = parse_systemctl_show(text)
    else:
        return False
    return True


def _parse_proc_section(proc: dict[str, Any], head: str, text: str, btime: float,
                        tck: int) -> None:
    """One process's section of a frame (``@stat``, ``@user``, ...) into ``proc``."""
    if head == "@stat":
        parsed = parse_stat(text)
        if parsed is not None:
            proc.update(
                name=parsed[0],
                state=parsed[1],
                ppid=parsed[2],
                start_ticks=parsed[3],
                started_at=round(btime + parsed[3] / tck, 2),
            )
    elif head == "@user" and text.strip():
        proc["user"] = text.strip()
    elif head == "@cmdline":
        proc["cmdline"] = text.strip()
    elif head == "@cgroup":
        cgroup = cgroup_path(text)
        if cgroup:
            proc["cgroup"] = cgroup
            unit = unit_of_cgroup(cgroup)
            if unit:
                proc["unit"] = unit
            proc.update(cgroup_facts(cgroup))
