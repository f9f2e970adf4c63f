"""What a stage process leaves for the driver: its config file, partial results and log tails.

The driver (``runner``) and every stage (``stages``, ``claims``) use these; the stages never import
the driver or each other, so a stage process loads only what it runs.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .plan import DeviceCheckConfig


def tail_lines(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def log_tails(folder: Path, since: float, pattern: str = "*.log", lines: int = 20) -> dict[str, str]:
    """The last lines of every log under ``folder`` written since ``since``: the scratch folder
    never comes back from the device, so a failure's evidence must travel in the result JSON."""
    logs = sorted(path for path in folder.rglob(pattern) if path.stat().st_mtime >= since)
    return {str(path.relative_to(folder)): tail_lines(path.read_text(errors="replace"), lines) for path in logs}


def partial_path(work_dir: Path, name: str) -> Path:
    return work_dir / f"stage-{name}.partial.json"


def save_partial(work_dir: Path, name: str, result: dict) -> None:
    """What a long stage has so far: the driver reports it if the stage is killed at its budget."""
    path = partial_path(work_dir, name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    tmp.replace(path)


def write_stage_config(config: DeviceCheckConfig, path: Path) -> Path:
    path.write_text(json.dumps(asdict(config)))
    return path
