"""A session's configuration as it is now: one writer, read at each decision.

A `session.update` is the only change; every part reads the configuration
at the moment it decides (through `now`), so an update takes effect at the
next decision. What the configuration decides (`policy`) is asked here,
with the server's token ceiling, so no part needs that number itself.
"""

from __future__ import annotations

from antiphon.session.actor import errors
from antiphon.session.assistant.responses import ResponseOptions
from antiphon.session.config import policy, session_config
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2


class CurrentConfig:
    def __init__(
        self,
        session_id: str,
        config: cpb.SessionConfig,
        *,
        max_output_tokens: int,
        preemptive: bool = False,
    ) -> None:
        self._session_id = session_id
        self._config = config
        self._max_output_tokens = max_output_tokens
        # The server answers at the user's first pause (preemption.py).
        self._preemptive = preemptive

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def now(self) -> cpb.SessionConfig:
        return self._config

    # ----------------------------------------------------------- update
    def merged(self, patch: cpb.SessionConfigPatch) -> cpb.SessionConfig:
        """What `patch` would make of the configuration; changes nothing.
        Raises `Rejection` for a patch that is wrong."""
        try:
            return session_config.merge(
                self._config, patch, max_output_tokens=self._max_output_tokens
            )
        except session_config.ConfigError as exc:
            raise errors.invalid(exc.code, str(exc), exc.param) from exc

    def adopt(self, merged: cpb.SessionConfig) -> bool:
        """`merged` is the configuration now; True when its lane changed."""
        lane_changed = session_config.lane(merged) != session_config.lane(self._config)
        self._config = merged
        return lane_changed

    # -------------------------------------------------------- decisions
    @property
    def lane(self) -> stage_pb2.Lane:
        return session_config.lane(self._config)

    @property
    def auto_response(self) -> bool:
        return policy.auto_response(self._config)

    def default_options(self) -> ResponseOptions:
        return policy.default_options(self._config, self._max_output_tokens)

    def requested_options(self, req: spb.CreateResponse) -> ResponseOptions:
        return policy.requested_options(self._config, req, self._max_output_tokens)

    def stage0_open(self) -> stage_pb2.Stage0Open:
        return policy.stage0_open(self._session_id, self._config, preemptive=self._preemptive)

    def stage1_open(self) -> stage_pb2.Stage1Open:
        return policy.stage1_open(self._session_id, self._config)
