"""spillway.RunConfig: the one typed run configuration, from a file and
keyword settings, read and set through the same table as files and flags."""

import ast
from pathlib import Path

import pytest

import spillway


def test_defaults_file_and_keywords_in_that_order(tmp_path):
    run = tmp_path / "run.toml"
    run.write_text('[schedule]\nsteps = 50\nbatch = 8\n[run]\nout = "runs/a"\n')
    c = spillway.RunConfig(run, batch=2, optimizer={"lr": 1e-3})
    assert c.schedule.steps == 50  # the file over the default
    assert c.schedule.batch == 2  # keywords over the file
    assert c.optimizer.lr == 1e-3
    assert c.run.out == "runs/a"
    assert c.schedule.seq == 128  # train's default
    assert spillway.RunConfig(command="plan").model.config == "llama3-8b"  # plan's


def test_settings_are_checked_as_a_files_are():
    c = spillway.RunConfig()
    c.memory.device_mem = "24GiB"
    assert c.memory.device_mem == "24GiB" and c.get("memory.device_mem") == "24GiB"
    c.memory.offload = "on"
    with pytest.raises(spillway.Error, match=r"^RunConfig: memory.offload is \"sideways\"; one of auto, on"):
        c.memory.offload = "sideways"
    with pytest.raises(spillway.Error, match="must be at least"):
        c.schedule.batch = 0
    assert spillway.RunConfig(seed=3).schedule.seed == 3  # a name one section alone has
    with pytest.raises(spillway.Error, match="unknown setting stepz"):
        spillway.RunConfig(stepz=3)
    with pytest.raises(spillway.Error, match="not a setting of plan"):
        spillway.RunConfig(command="plan", steps=3)


def test_to_toml_reads_back_the_same(tmp_path):
    c = spillway.RunConfig(steps=7, data={"paths": [Path("a.txt")], "vocab_size": 512}, run={"overwrite": True})
    (tmp_path / "back.toml").write_text(c.to_toml())
    assert spillway.RunConfig(tmp_path / "back.toml").to_dict() == c.to_dict()
    assert c.to_dict()["data"]["paths"] == ["a.txt"]


def test_the_stub_lists_every_setting():
    """python/spillway/__init__.pyi names each section's settings as the field table does."""
    stub = Path(spillway.__file__).with_name("__init__.pyi").read_text()
    classes = {node.name: node for node in ast.parse(stub).body if isinstance(node, ast.ClassDef)}
    for section in {f["key"].split(".")[0] for f in spillway.RunConfig.fields()}:
        declared = {n.target.id for n in classes[f"{section.capitalize()}Section"].body if isinstance(n, ast.AnnAssign)}
        table = {f["key"].split(".")[1] for f in spillway.RunConfig.fields() if f["key"].startswith(section + ".")}
        assert declared == table, section
