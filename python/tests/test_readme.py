"""README.md's "From Python" example, run exactly as written."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def python_example() -> str:
    text = README.read_text()
    section = text.split("## From Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "README's From Python section has one python example"
    return blocks[0]


def test_the_readme_example_runs_as_written(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(python_example())
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "cp-0001: available",
        "cp-0002: available",
        "owner: missing",
        "gc: 0 protecting, 0 to collect",
    ], run.stdout + run.stderr
    assert (tmp_path / "bank" / "checkpoints" / "cp-0001").is_dir()
