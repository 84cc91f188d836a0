"""Who a controller process is, and its settings (defined in the registry, common/config.py)."""

from __future__ import annotations

import dataclasses

from tidelog.common.settings import ControllerSettings

__all__ = ["ControllerConfig"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    controller_id: int
    endpoint: str  # host:port of this instance's admin API
    settings: ControllerSettings = dataclasses.field(default_factory=ControllerSettings.from_configs)

    @property
    def session_ttl_s(self) -> int:
        """The etcd lease TTL (whole seconds) of controller.session.timeout.ms."""
        return max(1, self.settings.controller_session_timeout_ms // 1000)
