"""The report's layout, checked on the figures its pages draw (a SYNTHETIC GPU-shaped run): every plotted series
runs left to right, every table fits its page in type of at least 8 pt and loses no row, each engine has one
colour on every page, page one holds the capacity and TPOT tables, and tick labels are plain numbers."""

import json
import math
import subprocess
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from synthetic_results import Injected, make_results

from analysis.measured.pipeline import analyse
from analysis.report import run as report
from analysis.report.pages.common import styled
from analysis.report.pdf import Pages
from analysis.report.style import ENGINE_GID, TOLERANCE, EngineStyle, severity_color
from analysis.results.load import load
from analysis.table import Table, is_numeric, units_in_headers


class Recorder:
    """Stands in for PdfPages: keeps every page's figure, drawn on an Agg canvas (text laid out, ticks labelled)."""

    def __init__(self) -> None:
        self.figs = []

    def savefig(self, fig, **kw) -> None:
        FigureCanvasAgg(fig).draw()
        self.figs.append(fig)

    def infodict(self) -> dict:
        return {}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    make_results(root, Injected(serve=True))  # the serve pages too
    a = analyse(load(root))
    rec = Recorder()
    pages = Pages(rec)
    for page in report.PAGES:
        page.render(pages, a)
    pages.flush()
    written = report.build_report(root)
    return root, a, rec.figs, written


def _is_axvline(line: Line2D) -> bool:
    x, y = np.asarray(line.get_xdata(), float), list(line.get_ydata())
    return len(x) == 2 and x[0] == x[1] and y == [0, 1]


def test_every_line_joins_points_of_increasing_x(run):
    _, _, figs, _ = run
    joined = 0
    for fig in figs:
        for ax in fig.axes:
            for line in ax.get_lines():
                x = np.asarray(line.get_xdata(), float)
                if line.get_linestyle() in ("None", "", " ") or len(x) < 2 or _is_axvline(line):
                    continue
                joined += 1
                assert np.all(np.diff(x) > 0), (fig.texts[0].get_text() if fig.texts else "", ax.get_title(), x)
    assert joined > 50  # the decode facets alone draw a fit and a roofline line per engine and batch


def test_decode_plot_has_one_panel_per_batch_and_linear_plain_axes(run):
    _, _, figs, _ = run
    fig = next(f for f in figs if f._suptitle is not None and f._suptitle.get_text().startswith("Decode"))
    titles = sorted(ax.get_title() for ax in fig.axes if ax.get_title().startswith("batch "))
    assert titles == sorted(f"batch {b}" for b in (1, 4, 16, 64))  # Injected.concurrency
    for ax in fig.axes:
        if ax.get_title().startswith("batch "):
            assert ax.get_xscale() == "linear" and ax.get_yscale() == "linear"


def test_tick_labels_are_plain_numbers(run):
    _, _, figs, _ = run
    labels = 0
    for fig in figs:
        for ax in fig.axes:
            for t in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
                text = t.get_text()
                labels += bool(text)
                assert "$" not in text and "×10" not in text and "e+" not in text, text
    assert labels > 100


def _tables(figs):
    for i, fig in enumerate(figs):
        for ax in fig.axes:
            gid = ax.get_gid() or ""
            if gid.startswith("table:"):
                yield i, fig, ax, gid[len("table:"):]


def test_every_table_fits_its_page_in_8_pt_type_and_loses_no_row(run):
    _, a, figs, _ = run
    rows_drawn = defaultdict(int)
    for _, fig, ax, title in _tables(figs):
        canvas = FigureCanvasAgg(fig)  # a closed figure's canvas is pyplot's no longer
        canvas.draw()
        renderer = canvas.get_renderer()
        page = fig.bbox
        (tab,) = ax.tables
        box = tab.get_window_extent(renderer)
        assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1, \
            (title, box, page)
        cells = tab.get_celld()
        for cell in cells.values():
            assert cell.get_text().get_fontsize() >= 8, title
            assert cell.get_text().get_window_extent(renderer).x1 <= page.x1 + 1, title
        headers = tuple(cells[0, c].get_text().get_text() for c in range(max(c for _, c in cells) + 1))
        rows_drawn[title.replace(" (continued)", ""), headers] += max(r for r, _ in cells)
    # The long decode table is continued over pages, every row set once.
    decode_title = styled(a, a.tables["decode"], "decode").title
    drawn = {k: v for k, v in rows_drawn.items() if k[0] == decode_title}
    assert drawn and all(v == len(a.decode) for v in drawn.values()), drawn
    assert len(a.decode) > 60  # more rows than one page holds


def test_each_engine_has_one_colour_on_every_page(run):
    root, _, figs, _ = run
    ids = sorted(p.stem for p in (root / "engines").glob("*.json"))
    style = EngineStyle.of(load(root))
    # Labels in the engines' natural order: len8192 before len32768, auto before fp8.
    assert [style.label(e) for e in ["len8192-bs16-auto-tp1-c95e2189", "len8192-bs16-fp8-tp1-20ad9c5a",
                                     "len32768-bs16-auto-tp1-4171fc55", "len32768-bs16-fp8-tp1-c5ac3757"]] == \
        ["E1", "E2", "E3", "E4"] == sorted(style.label(e) for e in ids)
    assert len({style.color(e) for e in ids}) == len(ids)  # four engines, four colours
    seen = defaultdict(set)
    pages_with = defaultdict(set)
    for i, fig in enumerate(figs):
        for ax in fig.axes:
            for artist in [*ax.get_lines(), *ax.patches, *ax.collections]:
                gid = artist.get_gid() or ""
                if not gid.startswith(ENGINE_GID):
                    continue
                label = gid[len(ENGINE_GID):]
                if isinstance(artist, Line2D):
                    color = to_rgba(artist.get_color())
                elif isinstance(artist, Rectangle) and artist.get_facecolor()[:3] == (1.0, 1.0, 1.0):
                    color = artist.get_edgecolor()  # an outlined or hatched bar carries the colour on its edge
                elif isinstance(artist, Rectangle):
                    color = artist.get_facecolor()
                else:
                    continue
                seen[label].add(tuple(round(c, 4) for c in color[:3]))
                pages_with[label].add(i)
    for e in ids:
        label = style.label(e)
        assert seen[label] == {tuple(round(c, 4) for c in to_rgba(style.color(e))[:3])}, (label, seen[label])
        assert len(pages_with[label]) >= 6, (label, pages_with[label])  # drawn on most plot pages
    # The label cells of the tables are set in the same colour.
    for _, _, ax, _ in _tables(figs):
        for cell in ax.tables[0].get_celld().values():
            text = cell.get_text()
            e = next((e for e in ids if style.label(e) == text.get_text()), None)
            if e is not None:
                assert to_rgba(text.get_color()) == to_rgba(style.color(e))


def _page_one(pdf) -> str:
    return subprocess.run(["pdftotext", "-layout", "-f", "1", "-l", "1", str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout


def test_page_one_holds_the_capacity_and_tpot_tables(run):
    root, _, _, written = run
    text = _page_one(written["pdf"])
    assert "Sequences that fit, per engine and sequence length" in text
    assert "Decode step and TPOT per batch (ms): roofline, predicted, measured" in text
    assert "Largest divergence of each quantity" in text
    engines = {json.loads(p.read_text())["id"]: json.loads(p.read_text()) for p in (root / "engines").glob("*.json")}
    e1 = engines["len8192-bs16-auto-tp1-c95e2189"]
    blocks = e1["capacity"]["num_gpu_blocks"]
    # vLLM's pool at 512 + 128 tokens (639 KV positions, 40 blocks of 16), at 4,096 + 1 (the saturation
    # phase's length: 256 blocks) and at max_model_len 8,192 (512 blocks); one block is the null block.
    want = [(blocks - 1) // math.ceil(639 / 16), (blocks - 1) // 256, (blocks - 1) // 512]
    assert want == [672, 105, 52]
    vllm_rows = [line.split() for line in text.splitlines() if line.split()[:2] == ["E1", "ideal"]
                 or (line.strip().startswith("vLLM") and len(line.split()) > 3)]
    assert any(row[1:4] == [f"{want[0]:,}", f"{want[1]:,}", "68"] for row in vllm_rows if row[0] == "vLLM"), vllm_rows
    # E1's measured decode step at batch 4 and its longest context common to all batches (6,144 + 64 tokens
    # mean context) is in the TPOT table, in ms with two decimals.
    (path,) = (root / "points").glob("len8192-bs16-auto-tp1-c95e2189--decode-c4-p6144-o128-*.json")
    point = json.loads(path.read_text())
    step_ms = f"{1e3 * point['measurements']['decode_step_s']:.2f}"
    e1_line = next(line for line in text.splitlines() if line.split()[:2] == ["E1", "6,208"])
    assert step_ms in e1_line.split(), (step_ms, e1_line)


def test_severity_colours_grow_with_the_error():
    assert severity_color(0.05) is None and severity_color(-TOLERANCE) is None
    amber, orange, red = (severity_color(x) for x in (0.2, 0.4, 1.0))  # 2×, 4× and 10× the 10 % tolerance
    assert len({amber, orange, red}) == 3 and None not in {amber, orange, red}
    assert severity_color(-1.0) == red and severity_color(float("nan")) is None and severity_color("—") is None


def test_units_move_into_headers_and_numbers_are_right_aligned():
    t = Table("t", pd.DataFrame({"overhead": ["4.188 ms", "12.000 ms", "—"], "error": ["+3.1%", "-20.0%", "+0.0%"],
                                 "budget": ["1.50 GiB", "512.00 MiB", "2.00 GiB"], "engine": ["E1", "E2", "E3"]}))
    u = units_in_headers(t)
    assert list(u.frame.columns) == ["overhead (ms)", "error (%)", "budget", "engine"]  # mixed units stay put
    assert list(u.frame["overhead (ms)"]) == ["4.188", "12.000", "—"]
    assert [is_numeric(u.frame[c]) for c in u.frame.columns] == [True, True, True, False]


def test_legends_stay_on_the_page_and_off_the_data(run):
    _, _, figs, _ = run
    legends = 0
    for fig in figs:
        if not fig.legends:
            continue
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        plots = [ax for ax in fig.axes if not (ax.get_gid() or "").startswith("table:")]
        for leg in fig.legends:
            legends += 1
            box = leg.get_window_extent(renderer)
            assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 + 1 and box.y0 >= 0 and box.y1 <= fig.bbox.y1 + 1, box
            for ax in plots:
                assert not box.overlaps(ax.bbox), (ax.get_title(), box, ax.bbox)
    assert legends >= 8
