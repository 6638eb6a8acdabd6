"""Reading a rendered report back: its text (pdftotext), its ink (pdftoppm), summary.md's tables."""

import shutil
import subprocess


def pdf_text(pdf) -> str:
    assert shutil.which("pdftotext"), "pdftotext (poppler-utils) is needed: `make test` installs it"
    return subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout


def page_ink(pdf, tmp_path) -> list[float]:
    """Fraction of non-white pixels on every page, rendered with pdftoppm."""
    import numpy as np
    from PIL import Image

    subprocess.run(["pdftoppm", "-r", "30", "-gray", str(pdf), str(tmp_path / "page")], check=True)
    pages = sorted(tmp_path.glob("page-*.pgm"))
    return [float((np.asarray(Image.open(p)) < 200).mean()) for p in pages]


def summary_cells(summary: str, title_start: str) -> list[list[str]]:
    """Body cells of the markdown table under the heading that starts with title_start."""
    lines = summary.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"### {title_start}"))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("### "):
            break
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows[1:]  # drop the header row
