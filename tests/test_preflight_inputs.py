"""Every preflight input is fed, from where preflight/context.py declares it comes from, checked both ways: each
declaration resolves (a Settings attribute that exists, or a value tools/preflight.py derives), and each optional
input leaves its default when the settings that switch it on are set. An input named unlike its setting, or one the
tool forgets, fails here instead of reporting "not set" on every real run."""

from __future__ import annotations

from dataclasses import MISSING, fields
from functools import reduce

import pytest

from preflight.context import DERIVED, SETTING, PreflightInput
from tests.conftest import settings_for
from tools.preflight import derived_inputs, preflight_input

DECLARED = {f.name: f for f in fields(PreflightInput)}
OPTIONAL = sorted(name for name, f in DECLARED.items() if "switched_on" in f.metadata)


def _default(name: str) -> object:
    declared = DECLARED[name]
    return declared.default_factory() if declared.default_factory is not MISSING else declared.default


def test_every_input_declares_one_source() -> None:
    for name, declared in DECLARED.items():
        assert (SETTING in declared.metadata) != (DERIVED in declared.metadata), name


def test_every_setting_path_names_an_attribute_of_the_settings() -> None:
    settings = settings_for()
    for name, declared in DECLARED.items():
        if SETTING in declared.metadata:
            path = declared.metadata[SETTING]
            try:
                reduce(getattr, path.split("."), settings)
            except AttributeError:
                pytest.fail(f"PreflightInput.{name} reads Settings.{path}, which does not exist")


@pytest.mark.parametrize("name", OPTIONAL)
def test_each_optional_input_is_fed_by_the_settings_that_switch_it_on(name: str) -> None:
    on = DECLARED[name].metadata["on"]
    value = getattr(preflight_input(settings_for(on)), name)
    assert value != _default(name), f"{name} stays {value!r} with {on}: the preflight would never run its check"


def test_the_optional_inputs_that_are_off_by_default_are_off_in_the_pinned_configuration() -> None:
    # The control of the test above: an input switched on whatever the settings would pass it vacuously.
    pinned = preflight_input(settings_for())
    switched_by_settings = [name for name in OPTIONAL if DECLARED[name].metadata["on"]]
    assert switched_by_settings
    for name in switched_by_settings:
        if name == "stacks_left_out":  # on with OBSERVABILITY=off, the pinned value: off with it on
            assert getattr(preflight_input(settings_for({"OBSERVABILITY": "on"})), name) == _default(name)
            continue
        assert getattr(pinned, name) == _default(name), name


def test_a_derived_input_the_tool_does_not_compute_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # preflight_input refuses to run with a derived input the tool forgot (or one it computes undeclared).
    import tools.preflight as tool

    def derived_without_the_kms_key(*args: object) -> dict[str, object]:
        computed = derived_inputs(*args)  # type: ignore[arg-type]
        computed.pop("model_source_kms_key")
        return computed

    monkeypatch.setattr(tool, "derived_inputs", derived_without_the_kms_key)
    with pytest.raises(RuntimeError, match="model_source_kms_key"):
        tool.preflight_input(settings_for())
