"""The operator's settings file: model unit globs; bad entries named, the rest used."""

from __future__ import annotations

from pathlib import Path

from gpudash.state.config import load


def test_model_globs_are_read_and_bad_entries_named(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    assert load(path) == (load(path)[0], [])  # no file: defaults, no complaint
    path.write_text('models = ["vllm-*", "sglang@*"]\n')
    settings, errors = load(path)
    assert settings.models == ("vllm-*", "sglang@*") and errors == []
    path.write_text('models = "vllm-*"\ncolour = 3\n')
    settings, errors = load(path)
    assert settings.models == ()
    assert len(errors) == 2 and "colour: unknown setting" in errors[0]  # in key order
    assert "models: expected a list" in errors[1]
    path.write_text("models = [")
    assert load(path)[1][0].startswith("config.toml:")
