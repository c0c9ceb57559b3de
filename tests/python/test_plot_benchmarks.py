"""scripts/plot_benchmarks.py on small checked-in samples (tests/python/data/plot_sample_*): every kind of
input gives a non-empty PNG, a malformed input is an error naming the file and the line, and every file under
bench/results (what the docs' plots come from) parses. Needs matplotlib (scripts/install_deps.sh); no torch,
no ranks."""

import importlib.util
import os
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "scripts", "plot_benchmarks.py")
DATA = os.path.join(HERE, "data")
SAMPLES = ["plot_sample_allreduce.log", "plot_sample_policy.jsonl", "plot_sample_bars.csv"]


def load_script():
    spec = importlib.util.spec_from_file_location("plot_benchmarks", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


pb = load_script()


def test_every_sample_gives_a_non_empty_png(tmp_path):
    r = subprocess.run([sys.executable, SCRIPT, "-o", str(tmp_path), *(os.path.join(DATA, s) for s in SAMPLES)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    expected = {"busbw_host_mpi_np2.png", "ratio_host_mpi_np2.png", "policy_pcie.png", "plot_sample_bars.png"}
    assert set(os.listdir(tmp_path)) == expected
    for name in expected:
        with open(tmp_path / name, "rb") as f:
            head = f.read(8)
        assert head == b"\x89PNG\r\n\x1a\n", name
        assert os.path.getsize(tmp_path / name) > 5000, name


def corrupt(tmp_path, sample, lineno, text):
    """A copy of `sample` whose line `lineno` (1-based) is replaced by `text`."""
    with open(os.path.join(DATA, sample)) as f:
        lines = f.read().splitlines()
    lines[lineno - 1] = text
    path = tmp_path / sample
    path.write_text("\n".join(lines) + "\n")
    return path


def error_of(capsys, tmp_path, bad):
    """Runs the script's main on `bad`: it must fail with status 2 and write nothing; returns stderr."""
    out = tmp_path / "out"
    assert pb.main(["-o", str(out), str(bad)]) == 2
    assert not out.exists() or not os.listdir(out)
    return capsys.readouterr().err


def test_a_malformed_table_row_names_the_file_and_line(tmp_path, capsys):
    bad = corrupt(tmp_path, "plot_sample_allreduce.log", 9, "       16384         4096 |       35.5  oops")
    err = error_of(capsys, tmp_path, bad)
    assert f"plot_benchmarks: error: {bad}:9: not a line of a bench_collectives log" in err, err


def test_a_non_numeric_field_names_the_file_and_line(tmp_path, capsys):
    bad = corrupt(tmp_path, "plot_sample_allreduce.log", 7,
                  "        4096         1024 |       24.2     0.169     0.169 |        3.3     1.231     x.yz |"
                  "   0.138     2.00     ok")
    assert f"{bad}:7: table row with a non-numeric field" in error_of(capsys, tmp_path, bad)


def test_a_log_without_header_is_refused(tmp_path, capsys):
    bad = tmp_path / "empty.log"
    bad.write_text("# nothing but comments\n")
    assert f"{bad}:0: no '# ringguard bench_collectives: ...' header" in error_of(capsys, tmp_path, bad)


def test_a_csv_must_name_its_source(tmp_path, capsys):
    bad = corrupt(tmp_path, "plot_sample_bars.csv", 3, "# no source line here")
    assert f"{bad}:1: no '# source:' line" in error_of(capsys, tmp_path, bad)


def test_a_policy_record_that_is_not_json_names_the_line(tmp_path, capsys):
    with open(os.path.join(DATA, "plot_sample_policy.jsonl")) as f:
        n = len(f.read().splitlines())
    bad = corrupt(tmp_path, "plot_sample_policy.jsonl", n, "{not json")
    assert f"{bad}:{n}: not JSON" in error_of(capsys, tmp_path, bad)


def test_the_checked_in_results_all_parse():
    results = os.path.join(REPO, "bench", "results")
    files = [os.path.join(results, f) for f in sorted(os.listdir(results))]
    parsed = 0
    for path in files:
        kind = {".log": pb.parse_bench_log, ".csv": pb.parse_csv, ".jsonl": pb.parse_policy,
                ".json": pb.parse_timeline}.get(
            os.path.splitext(path)[1])
        if kind is not None:
            kind(path)
            parsed += 1
    assert parsed > 0


def test_the_ranks_of_one_recorded_run_make_one_timeline_figure(tmp_path):
    """The DDP run recorded on the H200 (bench/results/README.md): two rank files, one figure, named after the run."""
    results = os.path.join(REPO, "bench", "results")
    files = [os.path.join(results, f"timeline_ddp_h200.{r}.json") for r in (0, 1)]
    assert pb.run(files, str(tmp_path)) == [os.path.join(str(tmp_path), "timeline_ddp_h200.png")]
    with open(tmp_path / "timeline_ddp_h200.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    ranks = sorted(pb.parse_timeline(p).rank for p in files)
    assert ranks == [0, 1]


def test_a_json_that_is_not_a_ringguard_timeline_is_refused(tmp_path, capsys):
    bad = tmp_path / "other.0.json"
    bad.write_text('{"traceEvents": [], "otherData": {"producer": "someone else"}}\n')
    assert f"{bad}:0: otherData.producer is not 'ringguard'" in error_of(capsys, tmp_path, bad)
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "no ts"}], "otherData": {"producer": "ringguard"}}\n')
    assert f"{bad}:0: traceEvents[0] has no ph or ts" in error_of(capsys, tmp_path, bad)
    bad.write_text('{"traceEvents": [,]}\n')
    assert f"{bad}:1: not JSON" in error_of(capsys, tmp_path, bad)


def test_hostile_timelines_are_refused_naming_the_file_and_the_limit(tmp_path, capsys):
    """Issue 47: a timeline nested 100000 deep was a RecursionError, a directory or a FIFO given as a timeline
    an IsADirectoryError or a hang, a byte that is not UTF-8 a UnicodeDecodeError naming no file."""
    deep = tmp_path / "deep.0.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    assert f"{deep}:0: nested deeper than the limit of 16 levels" in error_of(capsys, tmp_path, deep)
    mid = tmp_path / "mid.0.json"
    mid.write_text('{"traceEvents": [' + "[" * 20 + "]" * 20 + '], "otherData": {"producer": "ringguard"}}')
    assert f"{mid}:0: nested deeper than the limit of 16 levels" in error_of(capsys, tmp_path, mid)
    folder = tmp_path / "folder.0.json"
    folder.mkdir()
    assert f"{folder}:0: is a directory, not a regular file" in error_of(capsys, tmp_path, folder)
    fifo = tmp_path / "fifo.0.json"
    os.mkfifo(fifo)
    assert f"{fifo}:0: is a FIFO, not a regular file" in error_of(capsys, tmp_path, fifo)
    latin = tmp_path / "latin.0.json"
    text = b'{"traceEvents": [], "otherData": {"producer": "caf\xe9"}}'
    latin.write_bytes(text)
    assert f"{latin}:0: byte {text.index(0xe9)} is not UTF-8" in error_of(capsys, tmp_path, latin)
    policy = tmp_path / "deep.jsonl"
    policy.write_text('{"kind": "meta"}\n' + "[" * 5000 + "]" * 5000 + "\n")
    message = error_of(capsys, tmp_path, policy)
    assert f"{policy}:2: nested deeper than the limit of 16 levels: '[[[[" in message
    assert len(message) < 400, message
