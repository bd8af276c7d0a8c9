"""What each acting subcommand acts on, as its options say it (``gpudash.cli.args``
builds the rest of each parser): a unit, a container, the swap's two, a job's leftovers,
a GPU, or the host's own Slurm node (``drain``, ``resume``: the node is the host named,
so it takes no ``--node``)."""

from __future__ import annotations

import argparse
import re

from gpudash.domain.owners import CliSelector, cli_selectors
from gpudash.domain.owners.slurm_node import WORDS_MAX, one_line
from gpudash.protocol.schema import MAX_GPUS


def acted_on(p: argparse.ArgumentParser, command: str) -> None:
    """What an acting subcommand acts on: its unit, container, the swap's two, a GPU, or
    (drain, resume) the host's Slurm node itself."""
    if command == "swap":
        source = p.add_mutually_exclusive_group(required=True)
        source.add_argument("--from", dest="from_unit", metavar="UNIT",
                            help="the unit to reclaim (e.g. vllm-minimax-m25)")
        source.add_argument("--from-container", dest="from_container", metavar="NAME",
                            help="or a Docker or Podman container (name or id) to "
                            "reclaim: stop it, turn its restart policy off, reap what "
                            "is left")
        p.add_argument("--to", dest="to_unit", required=True, metavar="UNIT",
                       help="the unit to start once the memory is back")
        p.add_argument("--no-rollback", action="store_true",
                       help="when the new unit does not serve, leave the old one "
                       "stopped (default: stop the new one, disabled again if the swap "
                       "enabled it; start the old one again, enabled again if it was, "
                       "and prove it serves)")
    elif command in ("reclaim", "start"):
        _owner_flags(p.add_mutually_exclusive_group(required=True), command)
    elif command == "fix":
        p.add_argument("--unit", required=True,
                       help="the systemd service (.service optional)")
        p.add_argument("--revert", action="store_true",
                       help="remove gpudash's drop-in of the unit (only that file) "
                       "and reload")
        p.add_argument("--dry-run", action="store_true",
                       help="print the plan and the diff, and send nothing")
    elif command == "reap":
        which = p.add_mutually_exclusive_group()
        _owner_flags(which, command)
        which.add_argument("--slurm-epilog", action="store_true",
                           help="as Slurm's Epilog= on the node: --job $SLURM_JOB_ID on "
                           "$SLURM_JOB_GPUS, no prompt; where the memory is not back, "
                           "drain the node with gpudash's reason and exit non-zero")
        p.add_argument("--leave-strays", action="store_true",
                       help="with --job or --slurm-epilog: only report what holds the "
                       "job's GPUs outside any job (the site allows GPU work outside jobs)")
        p.add_argument("--dry-run", action="store_true",
                       help="print the plan of each host and send nothing")
    elif command == "reset":
        p.add_argument("--gpu", type=_gpu_index, required=True, metavar="N",
                       help="the GPU (its index, as nvidia-smi -L numbers it)")
    elif command == "drain":
        p.add_argument("--reason", type=_reason, default=None, metavar="TEXT",
                       help="why, in your words: Slurm is given \"gpudash: USER drained: "
                       f"TEXT\" (made one line; TEXT at most {WORDS_MAX} characters; sinfo "
                       "-R shows it)")
    elif command == "resume":
        pass  # the host's node: nothing more to name
    else:
        p.add_argument("--unit", required=True,
                       help="the systemd unit (.service optional)")


def _gpu_index(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,2}", text) or int(text) >= MAX_GPUS:
        raise argparse.ArgumentTypeError(f"not a GPU index: {text[:40]!r}")
    return int(text)


def _owner_flags(group: argparse._MutuallyExclusiveGroup, command: str) -> None:
    """The flags that name what ``command`` acts on: each owner kind's own
    (``gpudash.domain.owners.cli_selectors``: a kind's adapter declares them)."""
    for selector in cli_selectors(command):
        def checked(text: str, s: CliSelector = selector) -> str:
            try:
                return s.checked(text)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None

        group.add_argument(selector.flag, metavar=selector.metavar, type=checked,
                           help=selector.helps[command])


def _reason(text: str) -> str:
    """The operator's words, made one line (what the plan shows is what Slurm gets)."""
    words = one_line(text)
    if len(words) > WORDS_MAX:
        raise argparse.ArgumentTypeError(f"{len(words)} characters; at most {WORDS_MAX}")
    return words
