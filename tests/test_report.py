"""docs/reproduction.md (issue 15, item 3): the verdict rule against hand-made rows, and the generator
(experiments/fidelity_table.py -> claims.py -> report_md.py) on a tiny fake JSON folder."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import claims  # noqa: E402
import fidelity_table  # noqa: E402
from claims import Row, cells, row_verdict, summary, verdict  # noqa: E402


@pytest.mark.parametrize("paper, ours, ratio, word", [
    (100.0, 109.0, 1.09, "within 10%"),
    (100.0, 91.0, 0.91, "within 10%"),
    (100.0, 110.0, 1.10, "within 10%"),        # the edge belongs to the tighter class
    (100.0, 111.0, 1.11, "within 25%"),
    (100.0, 76.0, 0.76, "within 25%"),
    (100.0, 125.0, 1.25, "within 25%"),
    (100.0, 74.0, 0.74, "departs"),
    (100.0, 126.0, 1.26, "departs"),
    ((1.5, 1.9), 1.7, 1.0, "within 10%"),      # inside a stated range: ratio 1
    ((1.5, 1.9), 1.2, 0.8, "within 25%"),      # below: against the low end, 1.2 / 1.5
    ((1.5, 1.9), 2.47, 1.3, "departs"),        # above: against the high end, 2.47 / 1.9
    ((0.0, 0.01), 0.003, 1.0, "within 10%"),   # "<1%"
])
def test_verdict_thresholds(paper, ours, ratio, word):
    r, v = verdict(paper, ours)
    assert v == word
    assert r == pytest.approx(ratio)


def test_verdict_yes_no_and_missing():
    assert verdict(True, True) == (None, "holds")
    assert verdict(True, False) == (None, "departs")
    assert verdict(2.0, None) == (None, "not measured")
    assert verdict(None, 3.0) == (None, "not measured")


def test_cells_show_why_only_on_departure_and_the_experiment_when_missing():
    far = cells(Row("s", "c", 1.8, 1.0, "out/x.json", why="the mechanism"))
    assert (far["verdict"], far["ratio"], far["note"]) == ("departs", "0.56", "the mechanism")
    near = cells(Row("s", "c", 1.8, 1.75, "out/x.json", why="the mechanism"))
    assert near["verdict"] == "within 10%" and near["note"] == ""
    gone = cells(Row("s", "c", 1.8, None, would="experiments/fig9_speedup.py"))
    assert gone["verdict"] == "not measured" and gone["note"] == "run experiments/fig9_speedup.py"
    yes = cells(Row("s", "c", True, False, ours_text="2 of 9 cases", why="w"))
    assert (yes["paper"], yes["ours"], yes["note"]) == ("yes", "no (2 of 9 cases)", "w")
    rng = cells(Row("s", "c", (1.5, 1.9), 1.2))
    assert rng["paper"] == "1.50-1.90"


def test_a_calibrated_row_that_matches_exactly_is_not_a_match():
    """Issue 20 item 1: a number fitted to the paper's gets the verdict "calibrated" and says to what."""
    fit = Row("PK", "GEMM+AR intra-SM", 172.3, 172.3, "data/x.json", calibrated="p2p_reduce_eff fitted to it")
    assert verdict(fit.paper, fit.ours) == (1.0, "within 10%")          # the ratio alone would flatter
    assert row_verdict(fit) == (1.0, "calibrated")
    c = cells(fit)
    assert (c["ratio"], c["verdict"]) == ("1.00", "calibrated") and "p2p_reduce_eff fitted to it" in c["note"]
    inp = Row("PK", "sync 64 ns", 64.0, 64.0, "nuna_jax/kernel_presets.py", input="the preset's sync_intra_ns")
    assert row_verdict(inp) == (1.0, "input") and cells(inp)["note"] == "input: the preset's sync_intra_ns"
    # an input that departs from the paper stays out of the counts, but its note says that it departs and why
    far = cells(Row("NUNA", "scale-up 1 us", 1000.0, 510.0, input="500 ns switch + ports", why="other sources"))
    assert far["verdict"] == "input" and "departs" in far["note"] and "other sources" in far["note"]
    # a calibrated row with nothing measured is not measured
    assert row_verdict(Row("s", "c", 2.0, None, calibrated="x"))[1] == "not measured"


def test_summary_counts_predictions_only():
    import report_md
    rows = [Row("s", "fit", 172.3, 172.3, calibrated="fitted"),             # exact, calibrated: not a match
            Row("s", "in", 64.0, 64.0, input="preset"),                    # exact, an input: not a match
            Row("s", "near", 100.0, 105.0), Row("s", "mid", 100.0, 120.0), Row("s", "far", 100.0, 50.0),
            Row("s", "yes", True, True), Row("s", "none", 1.0, None)]
    sm = summary(rows)
    assert sm["predictions"] == 4 and (sm["calibrated"], sm["input"], sm["not_measured"]) == (1, 1, 1)
    assert sm["counts"]["within 10%"] == 1 and sm["claims"] == 7
    line = report_md.summary_line(rows)
    assert line.startswith("Summary, predictions only: 1 within 10%, 1 within 25%, 1 holds, 1 departs "
                           "(4 predictions)") and "1 calibrated" in line and "1 input" in line
    assert report_md.summary_line(rows) in report_md.render(rows, [])


JSON_KEYS = ["section", "claim", "paper", "ours", "ratio", "verdict", "model", "source", "note"]


def test_committed_report_flags_every_calibrated_row():
    """The rows issue 20 names as holding by construction are calibrated or inputs, in the JSON too."""
    rows = claims.collect(ROOT / "experiments" / "out", ROOT / "experiments" / "data", ROOT)
    v = {r.claim: row_verdict(r)[1] for r in rows}
    assert v["8x H100, N = 32768: GEMM+AR intra-SM (TFLOP/s)"] == "calibrated"
    assert v["GEMM+AR: inter-SM over intra-SM 3.62x"] == "calibrated"
    assert v["hiding condition K >= sR/2B on H100 bf16: K ~ 2197"] == "input"
    assert [v[c] for c in v if "~80% of peak" in c] == ["calibrated"] * 3
    assert [v[c] for c in v if "moving 1 GB" in c] == ["input"] * 6
    for c in ("TMA saturates NVLink with ~15 SMs", "register ops need >= 76 SMs",
              "register ops need 3.2-5.1x the SMs of TMA", "scale-up latency 1 us (ns)"):
        assert v[c] == "input", c
    # every other measured row is a prediction: it has no calibrated / input note
    for r in rows:
        if not (r.calibrated or r.input):
            assert row_verdict(r)[1] not in ("calibrated", "input")
    d = json.loads((ROOT / "docs" / "reproduction.json").read_text())
    assert isinstance(d, list) and d and all(list(x) == JSON_KEYS for x in d)
    by = {x["claim"]: x for x in d}
    assert by["8x H100, N = 32768: GEMM+AR intra-SM (TFLOP/s)"]["verdict"] == "calibrated"
    assert "pk_calibrate_atomic.py" in by["8x H100, N = 32768: GEMM+AR intra-SM (TFLOP/s)"]["note"]


def _fake(tmp_path):
    out, data, docs = tmp_path / "out", tmp_path / "data", tmp_path / "docs"
    out.mkdir()
    data.mkdir()
    # Figure 10: UA mean 5% above the paper's 920 ns, UA max 30% above 1,320 ns
    pol = lambda mean, mx: {"store_latency_ns": {"mean": mean, "max": mx}, "zero_load_store_ns": {"mean": mean - 10}}  # noqa: E731
    (out / "fig10_latency_hist.json").write_text(json.dumps({
        "policies": {"ua": pol(966.0, 1716.0), "nap+nar": pol(780.0, 1180.0)},
        "reduction": {"max_rel": 1 - 1180.0 / 1716.0}}))
    # Figure 12: 100 kB 1.6x (inside 1.5-1.9), 1 MB 1.2x, 64 MB 1.1x; falls with size
    (out / "fig12_size.json").write_text(json.dumps({"rows": [
        {"size_bytes": 10**5, "speedup": 1.6}, {"size_bytes": 10**6, "speedup": 1.2},
        {"size_bytes": 64 * 10**6, "speedup": 1.1}]}))
    # Figure 14: UA slows at a 4 MB GEMM, NAP+NAR never up to 64 MB: the ratio is only bounded, >= 2 * 64 / 4
    (out / "fig14_gemm_interference.json").write_text(json.dumps({
        "gemm_mb_per_gpu": [1, 2, 4, 8, 16, 32, 64], "threshold_ratio_0.95": None,
        "policies": {"ua": {"threshold_mb_0.95": 4}, "nap+nar": {"threshold_mb_0.95": None}}}))
    (out / "fig10_latency_hist.png").write_bytes(b"\x89PNG fake")
    return out, data, docs


def _row(text, claim):
    hits = [line for line in text.splitlines() if line.startswith("|") and claim in line]
    assert len(hits) == 1, (claim, hits)
    return [c.strip() for c in hits[0].strip("|").split("|")]


def test_generator_on_a_fake_json_folder(tmp_path):
    out, data, docs = _fake(tmp_path)
    args = ["--results", str(out), "--data", str(data), "--docs", str(docs)]
    assert fidelity_table.main(args) == 0
    text = (docs / "reproduction.md").read_text()
    # section | claim | paper | ours | ratio | verdict | model | source | note
    r = _row(text, "UA one-way store latency, mean")
    assert r[2:6] == ["920", "966", "1.05", "within 10%"] and "fig10_latency_hist.json" in r[7]
    r = _row(text, "UA one-way store latency, max")
    assert r[2:6] == ["1320", "1716", "1.30", "**departs**"] and r[8]        # departs: a reason is given
    r = _row(text, "All-Gather 100 kB: 1.5-1.9x")
    assert r[3:6] == ["1.60", "1.00", "within 10%"] and "fig12_size.json" in r[7]
    r = _row(text, "All-Gather 1 MB: 1.5-1.9x")
    assert r[3:6] == ["1.20", "0.80", "within 25%"]
    assert _row(text, "falls as the size grows")[3:6] == ["yes", "-", "holds"]
    r = _row(text, "concurrent GEMM slows NAP+NAR")
    assert r[2:6] == ["~2", ">= 32", "16.00", "**departs**"] and "bounded below" in r[8]
    # no Figure 15 JSON in the folder: its claims are listed, not measured, with the script that measures them
    r = _row(text, "decode TPOT reduction, geomean")
    assert r[3] == "-" and r[5] == "not measured" and "experiments/fig15_e2e.py" in r[8]
    # the one PNG that exists is copied next to the page and embedded by a relative link
    assert (docs / "img" / "fig10_latency_hist.png").read_bytes() == b"\x89PNG fake"
    assert "](img/fig10_latency_hist.png)" in text and "](img/fig9_speedup.png)" not in text
    assert "`nuna-jax reproduce fig9`" in text.split("Not run (no PNG):")[1]
    assert "reproduction.md" in (docs / "fidelity.md").read_text()
    # the same rows as JSON: the keys of issue 20, numbers as numbers, a range as [lo, hi]
    js = json.loads((docs / "reproduction.json").read_text())
    assert all(list(x) == JSON_KEYS for x in js) and len(js) == text.count("\n| ") - 1
    j = {x["claim"]: x for x in js}
    x = j["NAP+NAR over UA, 8-GPU All-Gather 1 MB: 1.5-1.9x (collectives up to 1 MB)"]
    assert (x["paper"], x["ours"], x["ratio"], x["verdict"]) == ([1.5, 1.9], 1.2, 0.8, "within 25%")
    assert x["source"].endswith("fig12_size.json") and x["model"] == "estimate"
    x = j["decode TPOT reduction, geomean over models and pod sizes (also abstract)"]
    assert (x["ours"], x["ratio"], x["verdict"]) == (None, None, "not measured")
    # it reads only JSON: a second run gives the same page, a changed JSON a changed number
    assert fidelity_table.main(args) == 0
    assert (docs / "reproduction.md").read_text() == text
    (out / "fig12_size.json").write_text(json.dumps({"rows": [{"size_bytes": 10**5, "speedup": 1.0}]}))
    assert fidelity_table.main(args) == 0
    r = _row((docs / "reproduction.md").read_text(), "All-Gather 100 kB: 1.5-1.9x")
    assert r[3:6] == ["1.00", "0.67", "**departs**"]


def test_committed_json_every_measured_row_names_an_existing_file():
    rows = claims.collect(ROOT / "experiments" / "out", ROOT / "experiments" / "data", ROOT)
    assert len(rows) >= 80
    for r in rows:
        if r.ours is not None:
            assert (ROOT / r.source).is_file(), r
        if r.would.startswith("experiments/"):
            assert (ROOT / r.would.split()[0]).is_file(), r.would


def test_save_figure_writes_png_and_pdf(tmp_path):
    from matplotlib.figure import Figure

    from nuna_jax.plots.save import save_figure
    fig = Figure()
    fig.subplots().plot([0, 1], [0, 1])
    png, pdf = save_figure(fig, tmp_path / "sub" / "fig.png", dpi=50)   # suffix dropped, folder made
    assert (png.name, pdf.name) == ("fig.png", "fig.pdf")
    assert png.read_bytes()[:4] == b"\x89PNG" and pdf.read_bytes()[:4] == b"%PDF"
    assert [p.name for p in save_figure(fig, tmp_path / "run.v2")] == ["run.v2.png", "run.v2.pdf"]
    with pytest.raises(ValueError, match="dpi"):
        save_figure(fig, tmp_path / "x", dpi=0)
