"""Typed service configuration: a deploy profile file, overridden by environment.

Each service declares a `pydantic_settings.BaseSettings` subclass and reads
its own section of the profile (`ANTIPHON_PROFILE`, a YAML file such as
`deploy/profiles/local.yaml`). Environment variables win over the file, so a
container can change one value without a new profile.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

PROFILE_ENV = "ANTIPHON_PROFILE"


class _ProfileSection(PydanticBaseSettingsSource):
    """One top-level section of the YAML profile, plus its `common` section."""

    def __init__(self, settings_cls: type[BaseSettings], section: str) -> None:
        super().__init__(settings_cls)
        self._values: dict[str, Any] = {}
        path = os.environ.get(PROFILE_ENV)
        if path:
            data = yaml.safe_load(Path(path).read_text()) or {}
            self._values = {**(data.get("common") or {}), **(data.get(section) or {})}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in self._values.items() if k in self.settings_cls.model_fields}


class ServiceSettings(BaseSettings):
    """Settings every service has."""

    model_config = SettingsConfigDict(env_prefix="ANTIPHON_", extra="ignore")
    profile_section: ClassVar[str] = "common"

    log_level: str = "INFO"
    # OTLP endpoint for traces; empty = traces are recorded but not exported.
    otlp_endpoint: str = ""
    # Seconds a SIGTERM drain may take before the process exits anyway.
    shutdown_grace_s: float = 10.0

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _ProfileSection(settings_cls, cls.profile_section))


S = TypeVar("S", bound=ServiceSettings)


def load(settings_cls: type[S], **overrides: Any) -> S:
    """Build settings: explicit overrides > environment > profile file > defaults."""
    return settings_cls(**overrides)
