"""A make target that needs AWS says so in one line when there are no credentials or AWS refuses them
(tools/entry.py one_line_errors), instead of botocore's traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from tools.entry import one_line_errors


def _main_raising(error: Exception) -> object:
    @one_line_errors
    def main(argv: list[str] | None = None) -> int:
        raise error

    return main


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (NoCredentialsError(), "error: no AWS credentials (Unable to locate credentials): set AWS_PROFILE"),
        (
            ClientError({"Error": {"Code": "ExpiredToken", "Message": "expired"}}, "GetCallerIdentity"),
            "error: AWS refused the credentials (ExpiredToken)",
        ),
    ],
)
def test_missing_or_refused_credentials_are_one_line(
    error: Exception, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main_raising(error)([]) == 2  # type: ignore[operator]
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err


def test_another_aws_error_is_not_dressed_as_a_credentials_one() -> None:
    error = ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetSecretValue")
    with pytest.raises(ClientError):
        _main_raising(error)([])  # type: ignore[operator]


def test_make_api_key_without_credentials_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tools import endpoint

    # Every source botocore's chain reads besides the files and the instance metadata (both pointed away below).
    sources = (
        "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
    )  # fmt: skip
    for name in sources:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("SERVE_EXPOSURE", "internal")
    monkeypatch.setenv("SERVE_CERTIFICATE_ARN", "none")
    monkeypatch.setenv("SERVE_API_KEYS", "on")
    assert endpoint.main(["api-key"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: no AWS credentials"), captured
    assert captured.err.count("\n") == 1


def test_a_network_error_is_not_a_credentials_one_and_does_not_break_the_check() -> None:
    from botocore.exceptions import ReadTimeoutError

    from tools.entry import credentials_problem

    assert credentials_problem(ReadTimeoutError(endpoint_url="https://eks", error="slow")) == ""
