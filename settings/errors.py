"""The one error type a bad setting raises: printed as one line by app.py, never as a traceback."""


class SettingError(ValueError):
    """A setting has a value we cannot deploy.

    The message names the setting by its environment variable, the value given and what is allowed.
    """

    def __init__(self, env_name: str, value: object, allowed: str) -> None:
        self.env_name = env_name
        self.value = value
        self.allowed = allowed
        super().__init__(f"{env_name}={value!r} is not allowed: {allowed}")
