"""A notice in the body when the current host gives nothing to show: what failed, what
was tried, what to do. The header has one line for it and cuts it at 80 columns; an
empty GPU table with no word about why leaves the operator guessing."""

from __future__ import annotations

from rich.text import Text

from gpudash.domain.model import HostSnapshot
from gpudash.domain.units import seconds
from gpudash.protocol.source import HostSource
from gpudash.ui.hosts import HostView
from gpudash.ui.palette import Palette
from gpudash.ui.text import clean
from gpudash.ui.widgets.quiet import QuietStatic

# (words in the error, what to do): the first match wins.
_ADVICE = (
    (("bad owner or permissions",),
     "fix the owner or mode the message names (ssh itself refuses that config too); "
     "gpudash tries again by itself."),
    (("name or service not known", "nodename nor servname", "name resolution",
      "errno -2", "errno -3", "errno -5"),
     "check the host name, or add it to ~/.ssh/config; `ssh {name}` must work from here."),
    (("connection refused",),
     "nothing accepts SSH there: is sshd running, and is the port right?"),
    (("no answer within", "timed out", "timeout", "no route to host", "unreachable"),
     "the host did not answer: is it up, and is a VPN or firewall in the way?"),
    (("authentication refused", "permission denied"),
     "the login was refused: check the user name and that your key is loaded (ssh-add -l)."),
    (("host key",), "verify the host key as the message says, then gpudash connects."),
    (("sudo",), "give this login a NOPASSWD sudoers rule, or run without --sudo."),
)
_DEFAULT_ADVICE = "run `ssh {name}` yourself to see the same error; gpudash keeps retrying."


def advice(error: str, name: str) -> str:
    low = error.lower()
    for words, text in _ADVICE:
        if any(w in low for w in words):
            return text.format(name=name)
    return _DEFAULT_ADVICE.format(name=name)


def tried(source: HostSource) -> str:
    """How gpudash reaches this host, in the words of the command line."""
    return source.route


def _no_gpu_data(snapshot: HostSnapshot) -> bool:
    return snapshot.source.value == "none" or not snapshot.gpus


def notice_text(view: HostView, now: float, pal: Palette) -> tuple[Text, str] | None:
    """(text, severity: error | warning) for the body, or None when all is well."""
    name = clean(view.name)
    if view.error and view.state != "connected":
        out = Text()
        out.append(f"✘ Cannot read {name}: ", style=f"bold {pal.error}")
        out.append(clean(view.error), style=pal.error)
        attempt = f"; attempt {view.attempt}" if view.attempt > 1 else ""
        if view.state == "reconnecting":
            retry = "; trying again now"
        elif view.retry_at is None:
            retry = "; not retried (it needs you)"
        else:
            retry = f"; next try in {seconds(round(max(0.0, view.retry_at - now)))}"
        out.append(f"\nTried: {clean(tried(view.source))}{attempt}{retry}.")
        out.append("\nWhat to do: ", style="bold")
        out.append(advice(view.error, name))
        age = view.age(now)
        if view.snapshot is not None and age is not None:
            out.append(f"\nBelow: the last sample, {seconds(round(age))} old.", style="dim")
        return out, "error"
    snap = view.snapshot
    if snap is not None and _no_gpu_data(snap):
        out = Text()
        why = "; ".join(clean(e) for e in snap.errors) or "the host reported no GPU"
        out.append(f"⚠ No GPU data from {name}: ", style=f"bold {pal.warning}")
        out.append(why)
        out.append(f"\nTried: NVML (libnvidia-ml.so.1), then nvidia-smi, on {name}.")
        out.append("\nWhat to do: ", style="bold")
        out.append("install or load the NVIDIA driver there (`nvidia-smi` must work on the "
                   "host). Processes and units below are still read.")
        return out, "warning"
    return None


class HostNotice(QuietStatic):
    """Shown only while the current host has something to explain."""

    def show(self, view: HostView, now: float, pal: Palette) -> None:
        notice = notice_text(view, now, pal)
        self.set_class(notice is not None, "-shown")
        if notice is None:
            return
        text, severity = notice
        self.set_class(severity == "warning", "-warn")
        self.update(text)
