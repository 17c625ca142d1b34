"""`reducelab plot links` and the utilisation histogram behind it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from helpers import EXAMPLE, LINKS_HEADER, cli
from reducelab.plots import utilization_histogram

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (which the format requires to come first)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def write_links_csv(d: Path, utilization: list[float]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    rows = [LINKS_HEADER] + [
        f"{i},{i},0,{i + 1},1,{int(u * 1e6)},{int(u * 1000)},{u},0,0.0,0,0" for i, u in enumerate(utilization)
    ]
    (d / "links.csv").write_text("\n".join(rows) + "\n")


def test_histogram_fractions() -> None:
    edges, fractions = utilization_histogram([0.0, 0.0, 0.05, 0.5, 0.95, 1.0], bins=10)
    assert edges == [10.0 * i for i in range(11)]
    # 0, 0, 0.05 in [0,10); 0.5 in [50,60); 0.95 and 1.0 in the last bin [90,100].
    assert fractions == pytest.approx([3 / 6, 0, 0, 0, 0, 1 / 6, 0, 0, 0, 2 / 6])
    assert sum(fractions) == pytest.approx(1.0)


def test_histogram_no_links() -> None:
    _, fractions = utilization_histogram([], bins=4)
    assert fractions == [0.0, 0.0, 0.0, 0.0]


def test_plot_links_writes_png(tmp_path: Path) -> None:
    results = tmp_path / "res"
    write_links_csv(results, [0.0, 0.1, 0.9, 0.92, 0.4, 1.0])
    proc = cli("plot", "links", results)
    assert proc.returncode == 0, proc.stderr
    png = results / "link_utilization.png"
    assert str(png) in proc.stdout
    width, height = png_size(png)
    assert width > 0 and height > 0
    assert png.stat().st_size > 1000


def test_plot_links_custom_out_and_bins(tmp_path: Path) -> None:
    results = tmp_path / "res"
    write_links_csv(results, [0.3, 0.6])
    out = tmp_path / "plots" / "u.png"
    proc = cli("plot", "links", results, "--out", out, "--bins", "5")
    assert proc.returncode == 0, proc.stderr
    assert png_size(out)[0] > 0
    assert not (results / "link_utilization.png").exists()


def test_plot_links_missing_csv(tmp_path: Path) -> None:
    proc = cli("plot", "links", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {tmp_path / 'links.csv'}: no such file")
    assert "Traceback" not in proc.stderr


def test_plot_links_rejects_bad_utilization(tmp_path: Path) -> None:
    write_links_csv(tmp_path, [0.5, 1.5])
    proc = cli("plot", "links", tmp_path)
    assert proc.returncode == 2
    assert "outside [0, 1]" in proc.stderr
    assert not (tmp_path / "link_utilization.png").exists()


def test_run_then_plot_example(tmp_path: Path) -> None:
    out = tmp_path / "example"
    proc = cli("run", EXAMPLE, "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr
    proc = cli("plot", "links", out)
    assert proc.returncode == 0, proc.stderr
    width, height = png_size(out / "link_utilization.png")
    assert width > 0 and height > 0


@pytest.mark.parametrize(("name", "magic"), [("x", b"\x89PNG"), ("x.svg", b"<?xml"), ("x.pdf", b"%PDF")])
def test_plot_links_writes_exactly_the_path_it_names(tmp_path: Path, name: str, magic: bytes) -> None:
    results = tmp_path / "res"
    write_links_csv(results, [0.3, 0.6])
    out = tmp_path / name
    proc = cli("plot", "links", results, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote {out}"
    assert out.read_bytes().startswith(magic)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["res", name])


def test_plot_links_unknown_image_format(tmp_path: Path) -> None:
    write_links_csv(tmp_path, [0.3])
    proc = cli("plot", "links", tmp_path, "--out", tmp_path / "u.jpeg")
    assert proc.returncode == 2
    assert proc.stderr == f"error: {tmp_path / 'u.jpeg'}: unknown image format '.jpeg' (use .png, .svg or .pdf)\n"
