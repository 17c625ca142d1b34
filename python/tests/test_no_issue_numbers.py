"""User-facing text names no issue numbers of the project's tracker ("issue 13", "Issue 14's
target", "(issue 13 item 4)"): a reader cannot look them up, so the text says what was meant
(the first full-scale run, the benchmark's target, an earlier version). Scanned: the README, the
docs (the dated logs under docs/results/bench-mpi/ are historical records and are skipped), the
scenario and parameter files, the scripts, the Python package and its tests, and the --help of
`reducelab` and every subcommand."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from helpers import REPO
from reducelab.cli import build_parser

# "issue 13", "Issues 13", "issue #13", also when the number wraps to the next line of a comment
# ("# ", "#: ", " * ", "/// ").
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues?[ \t]*(?:\n[ \t]*(?:#:?|\*|//[/!]?)?[ \t]*)?#?\d+")


def user_facing_files() -> list[Path]:
    files = [REPO / "README.md"]
    files += [p for p in (REPO / "docs").rglob("*.md") if "bench-mpi" not in p.relative_to(REPO / "docs").parts]
    files += [p for p in (REPO / "docs").rglob("*.toml") if "bench-mpi" not in p.relative_to(REPO / "docs").parts]
    files += list((REPO / "scenarios").rglob("*.toml"))
    files += [p for p in (REPO / "scripts").rglob("*") if p.suffix in {".sh", ".py"}]
    files += list((REPO / "python" / "reducelab").rglob("*.py"))
    files += [p for p in (REPO / "python" / "tests").rglob("*.py") if p.resolve() != Path(__file__).resolve()]
    return sorted(p for p in files if p.is_file())


def issue_numbers(text: str, where: str) -> list[str]:
    """Every match in `text` as `where:LINE: the match`."""
    return [f"{where}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}" for m in ISSUE_NUMBER.finditer(text)]


def help_texts() -> dict[str, str]:
    """`reducelab [SUB ...] --help` for the command and every subcommand, by command line."""
    out: dict[str, str] = {}

    def walk(parser: argparse.ArgumentParser, prog: str) -> None:
        out[prog] = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prog} {name}")

    walk(build_parser(), "reducelab")
    return out


def test_the_pattern_finds_issue_numbers() -> None:
    """The check can fail: each of these is found, the ordinary uses of the word are not."""
    for text in ("until issue 13, ReduceLab drew", "Issue 13's probe", "(issue 13)", "issues 13 and 18",
                 "see issue #14", "# as issue\n# 14 quotes them", "/* (issue 18,\n * item 3) */"):
        assert issue_numbers(text, "planted"), text
    for text in ("prefetch issues one line", "the issue's target", "a known issue: 2 cells", "tissue 3"):
        assert not issue_numbers(text, "planted"), text


def test_user_facing_files_name_no_issue_numbers() -> None:
    files = user_facing_files()
    assert REPO / "README.md" in files and any(p.suffix == ".toml" for p in files)
    found = [hit for p in files for hit in issue_numbers(p.read_text(encoding="utf-8"), str(p.relative_to(REPO)))]
    assert not found, "issue numbers in user-facing text (say what was meant instead):\n" + "\n".join(found)


def test_cli_help_names_no_issue_numbers() -> None:
    texts = help_texts()
    assert {"reducelab", "reducelab bench mpi", "reducelab reproduce"} <= texts.keys()
    # argparse wraps help text at any space, so the number may sit on the next line.
    found = [f"{prog} --help: {m.group(0)!r}" for prog, text in texts.items()
             for m in ISSUE_NUMBER.finditer(" ".join(text.split()))]
    assert not found, "issue numbers in --help:\n" + "\n".join(found)
