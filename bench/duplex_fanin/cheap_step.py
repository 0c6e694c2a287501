"""`python -m bench.duplex_fanin.cheap_step`: the real stage0 worker (`antiphon.stage0.main`)
with its model step replaced by a sleep of `BENCH_STEP_MS`; with `BENCH_STAGE=stage1`,
the real stage1 `mimi` worker with its decode step a sleep too.

On this CPU the tiny model's own step grows with the batch past the 80 ms
frame before the process carrying the streams does, which would hide what
the bench is after. A GPU's step mostly waits on the device with the GIL
released; a sleep does the same here. Everything else is the worker's own:
the gRPC streams, the jitter buffers or shared rings, gather (every row's
frame), deliver (every row's ModelFrame built), the front ends. Each frame
says a word every fourth step, so frames carry text as a talking model's do.
"""

from __future__ import annotations

import os
import time
from typing import Any


def install(step_ms: float) -> None:
    """Lockstep.compute as a sleep (in the stepper, or the one worker process)."""
    from antiphon.stage0.backends.moshi import lockstep

    def compute(self: Any, batch: Any) -> list[list[int]]:
        t0 = time.perf_counter()
        time.sleep(step_ms / 1000)
        self.steps = getattr(self, "steps", 0) + 1
        text = 5 if self.steps % 4 == 0 else self.model.lm_gen.lm_model.text_padding_token_id
        tokens = [[text, *range(self.model.dep_q)] for _ in range(self.slots)]
        self._metrics.duplex_step.observe(time.perf_counter() - t0)
        return tokens

    lockstep.Lockstep.compute = compute  # type: ignore[method-assign]


def install_stage1(step_ms: float) -> None:
    """MimiLockstep's decode as a sleep; every row's audio a quiet hiss (not
    silence, which a session is not sent)."""
    import numpy as np

    from antiphon.stage1.backends.mimi import lockstep

    def decode(self: Any, batch: Any) -> Any:
        t0 = time.perf_counter()
        time.sleep(step_ms / 1000)
        pcm = np.full((self.slots, 1920), 0.01, dtype=np.float32)
        if self._metrics is not None:
            self._metrics.step_seconds.observe(time.perf_counter() - t0)
        return pcm

    lockstep.MimiLockstep._decode = decode  # type: ignore[method-assign]


if __name__ == "__main__":
    # Here only: a front end imports this module as its parent's main, and
    # must not load torch.
    step_ms = float(os.environ.get("BENCH_STEP_MS", "40"))
    if os.environ.get("BENCH_STAGE") == "stage1":
        install_stage1(step_ms)
        from antiphon.stage1.main import main
    else:
        install(step_ms)
        from antiphon.stage0.main import main  # type: ignore[assignment]
    main()
