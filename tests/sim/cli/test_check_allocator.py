"""``pagesim check-allocator``: a verdict on the first line, the shrunk example of a
failure, exit codes 0 / 1 / 2, and one-line usage errors (never a traceback)."""

from __future__ import annotations

import sys

import pytest

from sim.cli import main

BROKEN = "tests.backend.broken_allocators"


def run(capsys, *argv) -> tuple[int, list[str], str]:
    code = main(["check-allocator", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


@pytest.mark.parametrize("spec", ["paged", "contiguous-pow2", "backend.blocks:BlockManager"])
def test_a_correct_allocator_passes(capsys, spec):
    code, out, err = run(capsys, spec, "--examples", "20")
    assert code == 0 and not err
    assert out[0].startswith(f"PASS {spec} (seed 0): ")
    assert "allocators driven through" in out[0] and out[1].startswith("  exercised: ")


def test_a_broken_allocator_fails_with_its_example(capsys):
    code, out, err = run(capsys, f"{BROKEN}:UncheckedLeakyFree", "--examples", "50")
    assert code == 1 and not err
    assert out[0].startswith(f"FAIL {BROKEN}:UncheckedLeakyFree (seed 0, after ")
    assert out[1:-1] == [
        "    state = CheckUncheckedLeakyFree()",
        "    state.setup(num_blocks=4, block_size=1, num_cpu_blocks=0, prefix_caching=True,"
        " num_offload_blocks=0, num_disk_blocks=0, kv_groups=())",
        "    seq_0 = state.allocate(computed_tokens=None, max_new_tokens=0, prompt=[0], salt=0)",
        "    state.free(seq=seq_0)",
        "    state.teardown()",
    ]
    assert out[-1].startswith("AssertionError: usage().used_blocks is 1")


def test_a_class_from_a_file_path(capsys):
    code, out, _ = run(capsys, "tests/backend/broken_allocators.py:FreeKeepsKeys")
    assert code == 1 and out[-1] == "AssertionError: free block 0 has a key"


def test_the_same_seed_gives_the_same_run(capsys):
    first = run(capsys, "contiguous-max", "--examples", "10", "--seed", "3")
    again = run(capsys, "contiguous-max", "--examples", "10", "--seed", "3")
    assert first == again and first[0] == 0


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("buddy", "buddy: expected a plug-in 'module:Class' or 'path/file.py:Class'"),
        ("no_such_module:Thing", "cannot load allocator class 'no_such_module:Thing'"),
        ("missing.py:Thing", "file not found: missing.py"),
        ("backend.blocks:Nope", "cannot load allocator class 'backend.blocks:Nope'"),
        ("backend.base:InvalidRequest", "is not a subclass of backend.base.Allocator"),
        ("backend.base:ReservingAllocator", "does not implement the Allocator methods"),
        (
            "backend.contiguous:ContiguousAllocator",
            "cannot construct ContiguousAllocator(num_blocks=8, block_size=2, num_cpu_blocks=2, "
            "enable_prefix_caching=False): TypeError",
        ),
    ],
)
def test_usage_errors_are_one_line_with_exit_code_2(capsys, spec, expected):
    code, out, err = run(capsys, spec)
    assert code == 2 and not out
    assert expected in err and err.startswith("pagesim: error: ")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_budgets_are_usage_errors(capsys):
    assert run(capsys, "paged", "--examples", "0")[0] == 2
    with pytest.raises(SystemExit) as stop:  # argparse: not an integer
        main(["check-allocator", "paged", "--steps", "many"])
    assert stop.value.code == 2


def test_without_hypothesis_it_says_so_in_one_line(capsys, monkeypatch):
    for name in [
        m for m in sys.modules if m == "backend.testing" or m.startswith("backend.testing.")
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # import hypothesis now fails
    code, out, err = run(capsys, "paged")
    assert code == 2 and not out
    assert "check-allocator needs hypothesis" in err and len(err.strip().splitlines()) == 1
    assert "pip install -e '.[test]'" in err and "make test" in err  # a checkout's install


def test_the_help_states_the_constructor_contract(capsys):
    with pytest.raises(SystemExit):
        main(["check-allocator", "--help"])
    text = capsys.readouterr().out
    assert "Class(num_blocks=N, block_size=B, num_cpu_blocks=C, enable_prefix_caching=P)" in text
    assert "supports_prefix_caching" in text and "exit codes: 0 passed, 1" in text


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("FreeHangs", "free() did not return within 0.5 s"),
        ("AppendExits", "append() called sys.exit(3)"),
    ],
)
def test_a_plugin_that_hangs_or_exits_is_a_fail_with_the_reason(capsys, monkeypatch, name, reason):
    monkeypatch.setattr("backend.testing.plugin_guard.CALL_LIMIT_S", 0.5)
    code, out, err = run(capsys, f"{BROKEN}:{name}", "--examples", "30")
    assert code == 1 and not err
    assert out[0].startswith(f"FAIL {BROKEN}:{name} (seed 0, after ")
    assert out[0].endswith(f"PluginStopped: {reason}") and len(out) == 1


def test_a_constructor_that_exits_is_one_line(capsys, monkeypatch):
    code, out, err = run(capsys, f"{BROKEN}:ConstructorExits")
    assert code == 2 and not out
    assert "the constructor called sys.exit('no')" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["OverridesEveryCommand", "OverridesTheCheckedCommands"])
def test_a_subclass_that_only_calls_super_passes(capsys, name):
    spec = f"tests/backend/faithful_allocators.py:{name}"
    code, out, err = run(capsys, spec, "--examples", "30")
    assert code == 0 and not err, out
    assert out[0].startswith(f"PASS {spec} (seed 0): ")


def test_an_allocator_error_names_where_the_allocator_raised_it(capsys):
    code, out, _ = run(capsys, "tests/backend/broken_allocators.py:RaisesOnFork")
    assert code == 1 and "    state.fork(parent=seq_0)" in out
    assert out[-1].startswith("KeyError: 1 (raised by the allocator at tests/backend/")
    assert "broken_allocators.py:" in out[-1] and out[-1].endswith(" in fork)")
