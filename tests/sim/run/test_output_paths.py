"""Output paths every command checks before any work: a folder where a file goes, a file
where a folder goes, a parent that is a file or not writable, a broken link; numeric
options out of range. One line naming the option and path, exit code 2, nothing written
(single files go through sim.run.folders.atomic_file: a temporary file renamed into
place)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sim.cli import main
from sim.run.folders import atomic_file, check_file_target

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "scenarios" / "tiny.yaml"


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def one_line_error(capsys, argv, *culprits) -> str:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as done:  # argparse's own errors (exit code 2, one line)
        code = done.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    for culprit in culprits:
        assert str(culprit) in err, (culprit, err)
    return err


def blocker(tmp_path) -> Path:
    path = tmp_path / "taken"
    path.write_text("someone's file\n")
    return path


def valid_calibration(tmp_path) -> Path:
    from sim.catalog.presets import MODEL_PRESETS
    from sim.costs.calibrated import FEATURES, Calibration, model_shape_key, save

    shape = model_shape_key(MODEL_PRESETS["tiny"])
    calibration = Calibration(dict.fromkeys(FEATURES, 1e-6), {}, {"model_shape": shape})
    return save(calibration, tmp_path / "cal.json")


def test_run_into_a_broken_link_fails_before_the_run(tmp_path, capsys):
    (tmp_path / "link").symlink_to(tmp_path / "gone" / "run")
    argv = ["run", TINY, "--out", tmp_path / "link", "--quiet"]
    assert "broken symbolic link" in one_line_error(capsys, argv, "link")
    assert files_under(tmp_path) == {"link"}


def test_a_parent_that_is_not_writable_is_named(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real_access(p, mode))
    for argv in (
        ["run", TINY, "--out", locked / "a" / "run", "--quiet"],
        ["schema", "--out", locked / "schema.json"],
        ["init", "x", "--out", locked / "x.yaml"],
    ):
        err = one_line_error(capsys, argv, locked)
        assert "is not writable" in err
    assert files_under(tmp_path) == {"locked"}


@pytest.mark.parametrize(
    "argv",
    [
        ["schema", "--out", "{folder}"],
        ["init", "x", "--out", "{folder}", "--force"],
        ["calibrate", "missing.csv", "--out", "{folder}"],
        ["profile", "--model", "tiny", "--out", "{folder}"],
        ["compare", "{run}", "--html", "{folder}"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_folder_where_a_file_goes(tmp_path, capsys, argv):
    folder = tmp_path / "out.file"
    folder.mkdir()
    argv = [a.format(folder=folder, run=tmp_path / "run") for a in argv]
    err = one_line_error(capsys, argv, folder)
    assert "is a folder; expected a file name" in err
    assert files_under(tmp_path) == {"out.file"}


@pytest.mark.parametrize(
    "argv",
    [
        ["run", TINY, "--out", "{under}", "--quiet"],
        ["schema", "--out", "{under}"],
        ["init", "x", "--out", "{under}"],
        ["calibrate", "missing.csv", "--out", "{under}"],
        ["profile", "--model", "tiny", "--out", "{under}"],
        ["compare", "{run}", "--html", "{under}"],
        ["compare", "{run}", "--html", "{ok}", "--plotly-js", "{under}"],
    ],
    ids=lambda argv: "-".join(map(str, argv[:1] + argv[-2:-1])),
)
def test_a_file_where_a_folder_goes(tmp_path, capsys, argv):
    taken = blocker(tmp_path)
    names = {"under": taken / "x" / "out", "run": tmp_path / "run", "ok": tmp_path / "c.html"}
    argv = [str(a).format(**names) for a in argv]
    assert f"{taken} is a file" in one_line_error(capsys, argv, taken)
    assert files_under(tmp_path) == {"taken"}


def test_validate_checks_its_folder_and_options_before_any_work(tmp_path, capsys):
    taken = blocker(tmp_path)
    cal = valid_calibration(tmp_path)
    argv = ["validate", TINY, "--calibration", cal, "--out", taken, "--quiet"]
    assert "exists and is not a folder" in one_line_error(capsys, argv, taken)
    for option, value in (("--warmup", "-1"), ("--step-repeats", "0"), ("--repeats", "0")):
        argv = ["validate", TINY, "--calibration", cal, option, value, "--out", tmp_path / "v"]
        one_line_error(capsys, argv, option)
    assert files_under(tmp_path) == {"taken", "cal.json"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--block-size", "0"], "--block-size must be >= 1"),
        (["--max-context", "0"], "--max-context must be >= 1"),
        (["--max-context", "100000"], "--max-context 100000 is beyond tiny's max_model_len"),
        (["--block-size", "4096"], "--block-size 4096 is beyond tiny's max_model_len"),
        (["--threads", str(10**9)], "--threads must be at most"),
        (["--seed", "-1"], "argument --seed: expected a non-negative integer, got -1"),
    ],
)
def test_profile_options_out_of_range(tmp_path, capsys, options, message):
    argv = ["profile", "--model", "tiny", *options, "--out", tmp_path / "p.csv"]
    assert message in one_line_error(capsys, argv)
    assert files_under(tmp_path) == set()


def test_init_refuses_a_name_yaml_reads_as_something_else(tmp_path, capsys):
    for name in ("a: b", "yes", "x # comment", "[1]"):
        one_line_error(capsys, ["init", name, "--out", tmp_path / "x.yaml"], repr(name))
    assert files_under(tmp_path) == set()
    assert main(["init", "fine-name", "--out", str(tmp_path / "sub" / "x.yaml")]) == 0
    assert (tmp_path / "sub" / "x.yaml").is_file()


def test_schema_creates_missing_folders_and_replaces_a_file_whole(tmp_path, capsys):
    target = tmp_path / "a" / "b" / "schema.json"
    assert main(["schema", "--out", str(target)]) == 0
    first = target.read_text()
    target.write_text("old")
    assert main(["schema", "--out", str(target)]) == 0
    assert target.read_text() == first and files_under(tmp_path) == {
        "a",
        "a/b",
        "a/b/schema.json",
    }


def test_atomic_file_leaves_nothing_when_the_writer_fails(tmp_path):
    target = tmp_path / "new" / "deeper" / "file.txt"
    with pytest.raises(RuntimeError), atomic_file(target) as partial:
        partial.write_text("half")
        raise RuntimeError("the writer failed")
    assert files_under(tmp_path) == set()
    existing = tmp_path / "kept.txt"
    existing.write_text("previous")
    with pytest.raises(KeyboardInterrupt), atomic_file(existing) as partial:
        partial.write_text("half")
        raise KeyboardInterrupt
    assert existing.read_text() == "previous" and files_under(tmp_path) == {"kept.txt"}


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="no /dev/null")
def test_a_device_is_not_replaced_by_a_file():
    with pytest.raises(ValueError, match="not a regular file"):
        check_file_target(Path("/dev/null"))


def test_a_negative_seed_is_a_usage_error_in_every_command_that_takes_one(tmp_path, capsys):
    for argv in (["run", TINY], ["validate", TINY], ["profile", "--scenario", TINY]):
        one_line_error(capsys, [*argv, "--seed", "-2", "--out", tmp_path / "o"], "--seed")
    assert files_under(tmp_path) == set()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", TINY, "--out", "{place}/pagesim-out", "--quiet"],
        ["schema", "--out", "{place}/schema.json"],
        ["profile", "--model", "tiny", "--out", "{place}/profile.csv"],
        ["calibrate", "--observed", "{run}", "--out", "{place}/cal.yaml"],
    ],
    ids=lambda argv: argv[0],
)
@pytest.mark.parametrize("place", ["/proc", "/sys"])
def test_a_system_folder_that_refuses_files_is_one_line(capsys, argv, place):
    """os.access says yes to root in /proc and /sys; creating the file says no."""
    if not Path(place).is_dir():
        pytest.skip(f"no {place} on this system")
    run = Path(__file__).resolve().parents[3] / "validation/recorded/runs/rtx4090-llama-3.1-8b"
    argv = [str(a).format(place=place, run=run) for a in argv]
    err = one_line_error(capsys, argv, place)
    assert "cannot write in" in err or "is not writable" in err  # as root, or not
