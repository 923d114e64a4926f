"""benchmarks/saved_model_table.py: in-process against SavedModel decoding, from result JSONs."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "saved_model_table.py"


def write_result(folder, name, variant, greedy, greedy_saved, beam=None, beam_saved=None):
    phases = {"greedy": {"tokens_per_s": greedy}, "greedy_saved_model": {"tokens_per_s": greedy_saved}}
    if beam is not None:
        phases.update(beam4={"tokens_per_s": beam}, beam4_saved_model={"tokens_per_s": beam_saved})
    (folder / name).write_text(json.dumps({"peer": "tf-transformer", "variant": variant, "phases": phases}))


def test_the_table_averages_runs_and_gives_the_savedmodels_change(tmp_path):
    write_result(tmp_path, "a.json", "graph", 4000.0, 3600.0, 2000.0, 2100.0)
    write_result(tmp_path, "b.json", "graph", 2000.0, 2400.0, 1000.0, 1050.0)
    write_result(tmp_path, "c.json", "xla", 5000.0, 5000.0)
    output = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert output[2] == "| graph | 2 | 3,000 | 3,000 | +0.0% | 1,500 | 1,575 | +5.0% |"
    assert output[3] == "| xla | 1 | 5,000 | 5,000 | +0.0% | n/a | n/a | n/a |"


def test_an_empty_folder_is_a_clear_error(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert result.returncode != 0 and "no result JSON" in result.stderr
