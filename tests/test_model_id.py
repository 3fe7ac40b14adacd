"""MODEL_ID, the name clients send: from MODEL_SOURCE unless given, ORG/NAME allowed (settings/model_source.py)."""

from __future__ import annotations

import pytest

from settings import SettingError
from tests.conftest import settings_for


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("Qwen/Qwen3.5-9B", "qwen3.5-9b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct"),
        ("s3://example-models/copies/Qwen3.5-9B", "qwen3.5-9b"),
    ],
)
def test_an_empty_model_id_is_the_sources_last_segment_lower_cased(source: str, expected: str) -> None:
    assert settings_for({"MODEL_SOURCE": source, "MODEL_ID": ""}).model_id == expected


def test_a_given_model_id_is_kept_and_may_hold_org_slash_name() -> None:
    settings = settings_for({"MODEL_SOURCE": "Qwen/Qwen3.5-9B", "MODEL_ID": "Qwen/Qwen3.5-9B"})
    assert settings.model_id == "Qwen/Qwen3.5-9B"


@pytest.mark.parametrize("bad", ["a//b", "/qwen", "qwen/", "qwen 3.5", "x" * 129])
def test_a_model_id_of_empty_segments_blanks_or_too_long_is_refused(bad: str) -> None:
    with pytest.raises(SettingError, match=r"MODEL_ID=.*'/' between them"):
        settings_for({"MODEL_ID": bad})


def test_a_source_whose_last_segment_is_no_name_asks_for_model_id() -> None:
    with pytest.raises(SettingError, match=r"MODEL_ID='' is not allowed: set, since MODEL_SOURCE's last segment"):
        settings_for({"MODEL_SOURCE": "s3://example-models/copies/_private", "MODEL_ID": ""})
