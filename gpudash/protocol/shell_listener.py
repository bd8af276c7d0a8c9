"""Who listens on a port, asked in plain sh (the shell fallback's hosts have no python3).

The same rule as the Python collector's ``listener_refusal``: a ready URL proves a unit
serves only when the socket listening on its port belongs to a process of the unit's
cgroup. The script finds the port's LISTEN inodes in ``/proc/net/tcp`` and ``tcp6``, the
process holding one among ``/proc/*/fd`` (at most ``LISTEN_SCAN_MAX`` descriptors looked
at), and prints that process's comm and cgroup, quoted line by line as the stream script
quotes host text: a file name or comm can never be read as a marker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gpudash.collector.host.ready import (
    LISTEN_SCAN_MAX,
    container_listener_refusal,
    unit_listener_refusal,
)
from gpudash.protocol.source import CommandResult, ContainerOwner, ListenerOwner

Run = Callable[[list[str], float], Awaitable[CommandResult]]

# $1: the port (an int checked before it is passed, never interpolated), $2: the cap.
# readlink -z: a link target holding a newline cannot pass for "socket:[INODE]".
LISTENER_SCRIPT = r"""
LC_ALL=C; export LC_ALL
q() { awk '{ print "|" $0 }'; }
hex=$(printf ':%04X' "$1"); cap=$2
inodes=$(awk -v p="$hex" '$4 == "0A" && $10 ~ /^[0-9]+$/ &&
  substr($2, length($2) - 4) == p { print "socket:[" $10 "]" }' \
  /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
[ -n "$inodes" ] || { echo "@none"; exit 0; }
seen=0; hidden=
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ -d "$d/fd" ] || continue
  if [ ! -r "$d/fd" ] || [ ! -x "$d/fd" ]; then hidden=1; continue; fi
  set -- "$d"/fd/*
  [ -e "$1" ] || [ -L "$1" ] || continue
  seen=$((seen + $#))
  if [ "$seen" -gt "$cap" ]; then echo "@capped"; exit 0; fi
  hit=$(readlink -z -- "$@" 2>/dev/null | tr '\n\000' '?\n' | grep -Fxc -e "$inodes")
  if [ "${hit:-0}" -gt 0 ]; then
    echo "@pid $pid"
    echo "@comm"; head -c 64 "$d/comm" 2>/dev/null | q
    echo "@cgroup"; head -c 65536 "$d/cgroup" 2>/dev/null | q
    echo "@end"; exit 0
  fi
done
if [ -n "$hidden" ]; then echo "@hidden"; else echo "@none"; fi
"""


@dataclass(frozen=True, slots=True)
class ShellListener:
    """What the script found: the listening pid with its comm and cgroup text, or none
    (``reason``: ``none`` nobody listens in this namespace, ``hidden`` descriptors this
    login cannot read, ``capped`` too many descriptors looked at, ``unread`` no answer)."""

    pid: int | None
    comm: str = ""
    cgroup: str = ""
    reason: str = ""


def listener_argv(port: int, cap: int = LISTEN_SCAN_MAX) -> list[str]:
    """The command that asks a host who listens on TCP ``port``."""
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError(f"not a TCP port: {port!r}")
    return ["sh", "-c", LISTENER_SCRIPT, "sh", str(port), str(int(cap))]


def parse_listener(output: str) -> ShellListener:
    """The script's output (host text quoted with ``|``) -> what it found."""
    lines = output.splitlines()
    heads = [line for line in lines if line.startswith("@")]
    if not heads:
        return ShellListener(None, reason="unread")
    first = heads[0]
    if not first.startswith("@pid "):
        reason = first[1:].strip()
        return ShellListener(None, reason=reason if reason in (
            "none", "hidden", "capped") else "unread")
    pid_text = first[5:].strip()
    if "@end" not in heads or not pid_text.isdigit():
        return ShellListener(None, reason="unread")
    sections: dict[str, list[str]] = {"@comm": [], "@cgroup": []}
    current: list[str] | None = None
    for line in lines[lines.index(first) + 1:]:
        if line.startswith("@"):
            current = sections.get(line.strip())
        elif line.startswith("|") and current is not None:
            current.append(line[1:])
    return ShellListener(int(pid_text), "\n".join(sections["@comm"]),
                         "\n".join(sections["@cgroup"]))


def shell_listener_refusal(port: int, owner: ListenerOwner, found: ShellListener
                           ) -> str | None:
    """Why the shell's finding refuses ``owner``'s ready URL, or None (its own listener, or
    nobody this login can see listens: the GET decides, as in the Python collector)."""
    if found.pid is None:
        return None
    if isinstance(owner, ContainerOwner):
        return container_listener_refusal(port, owner.id, owner.runtime, found.pid,
                                          found.comm, found.cgroup)
    return unit_listener_refusal(port, owner, found.pid, found.comm, found.cgroup)


async def ask_listener(url: str, owner: ListenerOwner, run: Run, limit_s: float
                       ) -> str | None:
    """The shell fallback's listener rule, asked of a host through ``run`` (its
    connection's way to run an argv): why ``url`` cannot prove ``owner`` serves, or None
    where the listener is the owner's or cannot be told."""
    try:
        port = urlsplit(url).port or 80
    except ValueError:
        return None
    result = await run(listener_argv(port), limit_s)
    return shell_listener_refusal(port, owner, parse_listener(result.output))
