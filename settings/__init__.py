"""Typed deploy settings: the one configuration object, parsed and validated once in app.py."""

from settings.configuration import Settings
from settings.errors import SettingError
from settings.loader import load_settings

__all__ = ["SettingError", "Settings", "load_settings"]
