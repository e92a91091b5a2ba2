"""spillway.train(): the command line's trainer from Python."""

import os
import signal
import threading
import time

import pytest

import spillway
from conftest import run_cli, step_losses


def test_losses_equal_the_command_line_with_the_same_config(tmp_path, run_file):
    run_cli("train", run_file, "--out", tmp_path / "cli")
    records = []
    result = spillway.train(spillway.RunConfig(run_file, out=str(tmp_path / "py")), on_step=records.append)

    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert [r["loss"] for r in records] == step_losses(tmp_path / "cli" / "train_log.jsonl")
    assert set(records[0]) >= {"step", "loss", "lr", "grad_norm", "tokens", "epoch", "tok_per_s", "elapsed_s"}
    assert result.steps_done == 6 and not result.stopped
    assert result.train_loss == records[-1]["loss"]
    assert (tmp_path / "py" / "step-0000006" / "model.safetensors").is_file()


def test_on_step_returning_false_stops_with_a_checkpoint(tmp_path, run_file):
    config = spillway.RunConfig(run_file, out=str(tmp_path / "run"))
    result = spillway.train(config, on_step=lambda r: r["step"] < 2)
    assert result.stopped and result.steps_done == 2
    assert result.checkpoint.endswith("step-0000002")

    config.run.resume = True
    resumed = spillway.train(config)
    assert resumed.steps_done == 6 and not resumed.stopped


def test_an_exception_in_on_step_stops_the_run_and_is_raised(tmp_path, run_file):
    def fail(record):
        if record["step"] == 3:
            raise ValueError("enough")

    with pytest.raises(ValueError, match="enough"):
        spillway.train(spillway.RunConfig(run_file, out=str(tmp_path / "run")), on_step=fail)
    assert (tmp_path / "run" / "step-0000003").is_dir()


def test_sigint_stops_at_the_step_boundary_with_its_checkpoint(tmp_path, run_file):
    def interrupt(record):
        if record["step"] == 2:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C in a terminal or a notebook does

    config = spillway.RunConfig(run_file, out=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt, match="after step 2"):
        spillway.train(config, on_step=interrupt)
    assert (tmp_path / "run" / "step-0000002").is_dir()
    # Python's own handler is back: a later Ctrl-C is a KeyboardInterrupt again.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_gil_is_free_while_steps_run(tmp_path, run_file):
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    thread = threading.Thread(target=tick)
    thread.start()
    try:
        start = time.monotonic()
        spillway.train(spillway.RunConfig(run_file, out=str(tmp_path / "run")))
        end = time.monotonic()
    finally:
        stop.set()
        thread.join()
    during = [t for t in ticks if start < t < end]
    # Held, the GIL would keep the thread from running at all until train()
    # returned: there are no Python calls inside a step to switch at.
    assert len(during) >= 10, f"{len(during)} ticks in {end - start:.3f} s of training"


def test_a_bad_setting_is_one_line_naming_it():
    with pytest.raises(spillway.Error) as e:
        spillway.RunConfig(steps="ten")
    assert str(e.value) == 'RunConfig: schedule.steps is "ten"; expected a whole number'


def test_a_missing_data_file_is_a_spillway_error(tmp_path, run_file):
    config = spillway.RunConfig(run_file, out=str(tmp_path / "run"), data={"paths": [str(tmp_path / "none.txt")]})
    with pytest.raises(spillway.Error, match="none.txt"):
        spillway.train(config)


def test_split_degrees_without_their_ranks_are_one_error(tmp_path, run_file):
    # One process has no tensor- or pipeline-parallel group to split into.
    for degree in ("tp", "pp"):
        config = spillway.RunConfig(run_file, out=str(tmp_path / degree), parallel={degree: 2})
        with pytest.raises(spillway.Error, match=f"--{degree}: 2 asks for 2 ranks in each group; this run has 1"):
            spillway.train(config)
