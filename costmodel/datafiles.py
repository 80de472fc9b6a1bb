"""Where a short name or a path given for a model or a GPU profile points."""

from __future__ import annotations

from pathlib import Path

from .errors import InputError


def find(field: str, name_or_path: str, folder: Path, suffix: str, what: str, folder_file: str | None = None) -> Path:
    """A file path, a folder holding `folder_file`, or a short name of a shipped file in `folder`."""
    path = Path(name_or_path)
    if folder_file and path.is_dir():
        path = path / folder_file
    if not path.is_file():
        path = folder / f"{str(name_or_path).lower()}{suffix}"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob(f"*{suffix}")))
        raise InputError(field, name_or_path, f"unknown {field}; known: {known} (or {what})")
    return path
