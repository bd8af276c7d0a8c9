"""What the dashboard imports before its first screen is drawn: nothing only a dialog or
the fleet of several hosts needs (each loads where it is first used; the
memory they cost is in docs/BENCHMARKS.md). A fresh interpreter, as the CLI starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_ui_fleet import fleet, fleet_app

from gpudash.demo.host import DemoHost
from gpudash.domain.clock import SteppedClock
from gpudash.ui.fleet_screen import FleetScreen

ROOT = Path(__file__).resolve().parents[1]

NOT_AT_START = (
    "gpudash.ui.fleet_screen", "gpudash.ui.fleet_table", "gpudash.fleetprom.rows",  # fleet
    "gpudash.ui.models", "textual.widgets._rich_log",  # the model picker and the journal
    "gpudash.ui.quit",  # quit while acting
    "ssl", "_ssl", "_hashlib",  # OpenSSL (gpudash.cli.lazy_openssl: placeholders only)
    # carrying an action out (gpudash.engine's names load from their modules when asked)
    "gpudash.engine.carry_out", "gpudash.engine.run", "gpudash.engine.run_io",
    "gpudash.engine.verdict", "gpudash.engine.proof",
)

CHILD = """
import sys, types
from gpudash.cli import lazy_openssl
lazy_openssl.defer()
import gpudash.cli.main, gpudash.ui.app, gpudash.ui.main_screen, gpudash.ui.plot
from gpudash.ui.plot import _plotext
_plotext()
# __dict__, not getattr: an attribute read makes a placeholder load its module
loaded = {n for n, m in list(sys.modules.items())
          if isinstance(m, types.ModuleType) and m.__dict__.get("__file__")}
print("\\n".join(sorted(loaded)))
"""


def test_the_dashboards_modules_leave_dialogs_and_the_fleet_for_later() -> None:
    cp = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    loaded = set(cp.stdout.split())
    assert "gpudash.ui.app" in loaded and "gpudash.ui.main_screen" in loaded
    assert sorted(loaded & set(NOT_AT_START)) == []


def test_the_engines_names_are_its_modules_and_none_is_a_module_name() -> None:
    """``from gpudash.engine import X`` gives what X's module defines. A name that is also
    a submodule's (``execute`` was both) would be shadowed by that module once anything
    imports it: the import system sets the package's attribute."""
    import importlib
    import pkgutil

    import gpudash.engine as engine

    submodules = {m.name for m in pkgutil.iter_modules(engine.__path__)}
    assert sorted(set(engine.__all__) & submodules) == []
    for name in engine.__all__:
        module = importlib.import_module(f"gpudash.engine.{engine._MODULE_OF[name]}")
        assert getattr(engine, name) is getattr(module, name), name


def test_one_host_makes_no_fleet_screen_and_several_do() -> None:
    one = fleet_app([DemoHost(clock=SteppedClock())])
    assert one.fleet is None and not one.fleet_shown
    several = fleet_app(fleet(3))
    assert isinstance(several.fleet, FleetScreen)
