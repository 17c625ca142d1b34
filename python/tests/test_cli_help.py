"""Help texts: every command explains itself with an example."""

from __future__ import annotations

import pytest

from helpers import cli


@pytest.mark.parametrize(
    ("args", "example"),
    [
        ((), "reducelab run scenarios/example.toml"),
        (("run",), "reducelab run scenarios/example.toml"),
        (("bench",), "reducelab bench engine"),
        (("bench", "engine"), "reducelab bench engine --name NAME --repeat 5"),
        (("bench", "mpi"), "reducelab bench mpi --ranks 8 --sizes 1MiB 16MiB --reps 11"),
        (("plot",), "reducelab plot links results/example"),
        (("plot", "links"), "reducelab plot links results/example"),
    ],
)
def test_help_has_examples(args: tuple[str, ...], example: str) -> None:
    proc = cli(*args, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: reducelab {' '.join(args)}".rstrip())
    assert "examples:" in proc.stdout
    assert example in proc.stdout


def test_no_command_is_a_usage_error() -> None:
    proc = cli()
    assert proc.returncode == 2
    assert "required: COMMAND" in proc.stderr


def test_version() -> None:
    proc = cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("reducelab ")
