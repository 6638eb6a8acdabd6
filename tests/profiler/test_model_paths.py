"""Model references mean one thing wherever kvprof runs: a spec's relative `model:` path is the spec's,
not the current directory's; a bare name is a catalog name unless only a directory has it; a name that is
both is refused naming both; engine ids come from the config's contents, never its path."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.catalog import MODELS_DIR, config_sha256, resolve_model
from profiler.cli import app
from profiler.preflight import validate
from profiler.spec import SpecError, expand, load_spec

runner = CliRunner()
GQA, MHA = MODELS_DIR / "tiny-llama-gqa", MODELS_DIR / "tiny-llama-mha"
# KV bytes per token, bfloat16: layers × 2 (K, V) × KV heads × head_dim × 2 B (the two configs in the catalog)
GQA_KV_PER_TOKEN = 4 * 2 * 2 * 32 * 2  # 1,024
MHA_KV_PER_TOKEN = 3 * 2 * 4 * 32 * 2  # 1,536

SPEC = ("name: t\nmodel: {model}\nengine:\n  max_model_len: 1024\n  block_size: 32\n"
        "  kv_cache_memory_bytes: 16MiB\nworkload:\n  concurrency: [1]\n  prompt_len: [64]\n  output_len: 8\n")


def project(root: Path, model: str = "../models/mymodel", config: Path = GQA) -> Path:
    """root/sweeps/s.yaml naming a model folder root/models/mymodel (a copy of a catalog config)."""
    (root / "models" / "mymodel").mkdir(parents=True)
    shutil.copy(config / "config.json", root / "models" / "mymodel" / "config.json")
    (root / "sweeps").mkdir()
    spec = root / "sweeps" / "s.yaml"
    spec.write_text(SPEC.format(model=model))
    return spec


def ids(spec: Path) -> list[str]:
    return [e.id for e in expand(load_spec(spec)).engines]


def test_relative_model_path_is_the_specs_from_any_directory(tmp_path, monkeypatch):
    spec = project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # ../models/mymodel from here does not exist
    _, plan = validate(spec, platform="cpu")
    assert plan.engines[0].model_dir == str(tmp_path / "proj" / "models" / "mymodel")
    monkeypatch.chdir(tmp_path / "proj" / "sweeps")  # …and from the spec's own directory: the same folder
    assert expand(load_spec("s.yaml")).engines[0].model_dir == str(tmp_path / "proj" / "models" / "mymodel")


def test_engine_ids_do_not_depend_on_how_or_where_the_model_path_is_written(tmp_path, monkeypatch):
    spec = project(tmp_path / "proj")
    absolute = tmp_path / "proj" / "sweeps" / "abs.yaml"
    absolute.write_text(SPEC.format(model=tmp_path / "proj" / "models" / "mymodel"))
    catalog = tmp_path / "proj" / "sweeps" / "cat.yaml"
    catalog.write_text(SPEC.format(model="tiny-llama-gqa"))  # the same config.json contents
    monkeypatch.chdir(tmp_path)
    relative_ids = ids(spec)
    monkeypatch.chdir(tmp_path / "proj" / "models")
    assert ids(spec) == relative_ids
    assert ids(absolute) == relative_ids
    assert ids(catalog) == relative_ids
    # The spec moved together with its model folder: the same engines, resumable in the old results.
    shutil.copytree(tmp_path / "proj", tmp_path / "moved")
    assert ids(tmp_path / "moved" / "sweeps" / "s.yaml") == relative_ids
    # What they hash is the config's contents: sha256 of {"config": config.json} as canonical JSON.
    config = json.loads((GQA / "config.json").read_text())
    expected = hashlib.sha256(json.dumps({"config": config}, sort_keys=True).encode()).hexdigest()
    assert expand(load_spec(spec)).engines[0].model_sha256 == expected == config_sha256(GQA)


def test_a_bare_name_is_a_folder_beside_the_spec_not_in_the_current_directory(tmp_path, monkeypatch):
    spec = project(tmp_path / "proj", model="mymodel")
    shutil.copytree(tmp_path / "proj" / "models" / "mymodel", tmp_path / "proj" / "sweeps" / "mymodel")
    monkeypatch.chdir(tmp_path)
    assert expand(load_spec(spec)).engines[0].model_dir == str(tmp_path / "proj" / "sweeps" / "mymodel")


def test_a_folder_in_the_current_directory_does_not_hide_the_catalog_entry_of_a_spec(tmp_path, monkeypatch):
    spec = project(tmp_path / "proj", model="tiny-llama-gqa")
    decoy = tmp_path / "cwd" / "tiny-llama-gqa"  # another model under the catalog's name
    decoy.mkdir(parents=True)
    shutil.copy(MHA / "config.json", decoy / "config.json")
    monkeypatch.chdir(tmp_path / "cwd")
    assert expand(load_spec(spec)).engines[0].model_dir == str(GQA)


def test_a_name_that_is_both_a_catalog_model_and_a_folder_beside_the_spec_is_refused(tmp_path):
    spec = project(tmp_path / "proj", model="tiny-llama-gqa")
    shutil.copytree(tmp_path / "proj" / "models" / "mymodel", tmp_path / "proj" / "sweeps" / "tiny-llama-gqa")
    with pytest.raises(SpecError) as exc:
        validate(spec, platform="cpu")
    message = str(exc.value)
    assert message.startswith(f"{spec}:2: model: ")  # the line of `model:`
    assert "both the catalog model tiny-llama-gqa and the directory" in message
    assert str(tmp_path / "proj" / "sweeps" / "tiny-llama-gqa") in message
    assert "'./tiny-llama-gqa'" in message and "'catalog:tiny-llama-gqa'" in message
    # Either spelling then says which.
    for model, directory in (("./tiny-llama-gqa", tmp_path / "proj" / "sweeps" / "tiny-llama-gqa"),
                             ("catalog:tiny-llama-gqa", GQA)):
        spec.write_text(SPEC.format(model=model))
        assert validate(spec, platform="cpu")[1].engines[0].model_dir == str(directory)


def test_plan_model_that_is_both_a_catalog_name_and_a_folder_here_is_refused(tmp_path, monkeypatch):
    (tmp_path / "tiny-llama-gqa").mkdir()
    shutil.copy(MHA / "config.json", tmp_path / "tiny-llama-gqa" / "config.json")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["plan", "--model", "tiny-llama-gqa", "--json"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert len(res.stderr.strip().splitlines()) == 1
    assert f"both the catalog model tiny-llama-gqa and the directory {tmp_path / 'tiny-llama-gqa'}" in res.stderr
    for model, kv in (("./tiny-llama-gqa", MHA_KV_PER_TOKEN), ("catalog:tiny-llama-gqa", GQA_KV_PER_TOKEN)):
        res = runner.invoke(app, ["plan", "--model", model, "--json"])
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["kv_bytes_per_token"] == kv


def test_a_missing_model_path_names_where_it_was_looked_for(tmp_path, monkeypatch):
    spec = project(tmp_path / "proj", model="../models/nope")
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["validate", str(spec), "--platform", "cpu"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert (f"model: model path '../models/nope' does not exist: looked at {tmp_path / 'proj' / 'models' / 'nope'} "
            f"(relative to the spec in {tmp_path / 'proj' / 'sweeps'})") in res.stderr


def test_resolve_model_takes_config_json_paths_and_bare_folders(tmp_path, monkeypatch):
    project(tmp_path)
    monkeypatch.chdir(tmp_path / "models")
    arch, directory = resolve_model("mymodel/config.json")
    assert directory == tmp_path / "models" / "mymodel" and arch.name == "mymodel"
    arch, directory = resolve_model("mymodel")  # no catalog entry of that name: the folder
    assert directory == tmp_path / "models" / "mymodel" and arch.num_layers == 4


def test_a_results_model_name_is_the_catalog_entry_whatever_the_cwd_holds(tmp_path, monkeypatch):
    """The analysis of a run whose spec named a catalog model reads the catalog, not a folder of that name in the
    directory the report runs from (which a spec would have to call ./NAME)."""
    from analysis.measured.theory_vs_measured import architecture

    shadow = tmp_path / "llama-3.1-8b"
    shadow.mkdir()
    (shadow / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 2}')
    monkeypatch.chdir(tmp_path)
    a = architecture("/nonexistent/model/dir", "llama-3.1-8b")
    assert a is not None and a.num_layers == 32  # Llama 3.1 8B's 32 layers, not the folder's 2
