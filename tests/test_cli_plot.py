"""``--plot FILE`` on place, simulate and info writes a PNG or PDF; another suffix exits 2 before any work."""

from nuna_jax.cli import main


def test_place_info_simulate_plot(tmp_path, capsys):
    png, pdf, sim_png = tmp_path / "place.png", tmp_path / "info.pdf", tmp_path / "sim.png"
    assert main(["place", "--collective", "allgather", "--size", "100kB", "--gpus", "2", "--plot", str(png),
                 "--json"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["info", "--system", "mono", "--plot", str(pdf), "--json"]) == 0
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert main(["simulate", "--collective", "allgather", "--size", "20kB", "--gpus", "2", "--plot", str(sim_png),
                 "--json"]) == 0
    assert sim_png.stat().st_size > 1000


def test_bad_plot_suffix_is_a_user_error(tmp_path, capsys):
    assert main(["info", "--plot", str(tmp_path / "x.gif")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ".png, .pdf or .svg" in err[0]
    assert not (tmp_path / "x.gif").exists()
