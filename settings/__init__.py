"""Typed deploy settings: the one configuration object, parsed and validated once in app.py."""

from settings.errors import SettingError
from settings.loader import load_settings
from settings.model import Settings

__all__ = ["SettingError", "Settings", "load_settings"]
