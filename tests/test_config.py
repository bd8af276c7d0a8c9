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
    assert len(errors) == 2 and str(errors[0]) == f"{path}:2: colour: unknown setting"
    assert str(errors[1]).startswith(f"{path}:1: models: expected a list")  # in key order
    assert not any(e.fails_closed for e in errors)  # neither is a safety setting
    path.write_text("models = [")
    (whole,) = load(path)[1]
    assert whole.key is None and whole.fails_closed and str(whole).startswith(f"{path}:")
