"""The layers hold: checked statically (import-linter) and at run time, from one list.

The list of layers is ``pyproject.toml``'s (the ``Layers`` contract); the packages below
the UI are its ``forbidden`` contract's. Every package of gpudash is in a layer, and no
module of gpudash imports itself back through others (no cycle).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpudash"
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "contracts"]
LAYERS = next(c for c in CONTRACTS if c["type"] == "layers")
BELOW_UI = next(c for c in CONTRACTS if c["type"] == "forbidden"
                and "textual" in c["forbidden_modules"])["source_modules"]

LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def layer_packages() -> list[str]:
    return [name.strip() for layer in LAYERS["layers"] for name in layer.split("|")]


def test_import_linter_contracts_hold() -> None:
    r = subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_package_of_gpudash_is_in_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert modules == set(), f"modules outside every layer: {sorted(modules)}"
    assert packages == set(layer_packages())
    below = {m.removeprefix("gpudash.") for m in BELOW_UI}
    assert below == set(layer_packages()) - {"cli", "ui"}


def test_the_host_program_is_forbidden_every_other_package() -> None:
    [host] = [c for c in CONTRACTS if c.get("source_modules") == ["gpudash.collector.host"]]
    assert set(host["forbidden_modules"]) == {
        f"gpudash.{name}" for name in layer_packages() if name != "collector"}


def test_below_the_ui_imports_without_textual_or_rich() -> None:
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for top in BELOW_UI for p in (ROOT / top.replace(".", "/")).rglob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_the_dashboard_starts_without_what_its_first_screen_may_not_draw() -> None:
    """Issue 30 (RSS): the dashboard's modules, as ``gpudash HOST`` imports them before
    its first screen, leave out plotext (5.6 MB: imported when a plot is first drawn; a
    terminal under 130x30 never draws one) and the Prometheus client's HTTP stack (urllib,
    http.client, email: 3 MB, for ``--prometheus`` only)."""
    code = (
        "import sys\n"
        "import gpudash.cli.main, gpudash.ui.app\n"
        "lazy = ('plotext', 'urllib.request', 'http.client', 'email.parser',\n"
        "        'gpudash.fleetprom.client')\n"
        "print(','.join(m for m in lazy if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def _imports(path: Path, module: str) -> set[str]:
    """The gpudash modules ``module`` (at ``path``) imports, at any depth of its code."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("gpudash")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if not base.startswith("gpudash"):
                continue
            for a in node.names:  # ``from gpudash.x import y``: y may be a module
                out.add(f"{base}.{a.name}")
            out.add(base)
    return out


def test_no_import_cycle_in_gpudash() -> None:
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in PACKAGE.rglob("*.py")}
    graph = {m: {i for i in _imports(p, m) if i in files and i != m} for m, p in files.items()}
    # a package's own __init__ importing its modules is how packages are made: not a cycle
    for m in graph:
        graph[m] = {i for i in graph[m] if not m.startswith(i + ".")}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(m: str) -> None:
        if m in done:
            return
        assert m not in visiting, "import cycle: " + " -> ".join(
            visiting[visiting.index(m):] + [m])
        visiting.append(m)
        for dep in sorted(graph[m]):
            visit(dep)
        visiting.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)


def test_modules_stay_small_and_the_app_a_composition_root() -> None:
    """Issue 18: no module of gpudash over 500 lines, ``ui/app.py`` at most 300 (a big
    module is where responsibilities pile up; split it by what it does)."""
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}, long
    app = len((PACKAGE / "ui" / "app.py").read_text().splitlines())
    assert app <= 300, app
