"""spillway.plan(): the plan `spillway plan` prints, as an object."""

import re

import pytest

import spillway
from conftest import run_cli


def test_plan_has_the_command_lines_figures():
    config = spillway.RunConfig(command="plan", device_mem="24GiB", host_mem="200GiB", seq=2048)
    p = spillway.plan(config)
    out, _ = run_cli("plan", "--device-mem", "24GiB", "--host-mem", "200GiB", "--seq", "2048")

    assert p.name == "llama3-8b" and p.layers == 32 and p.seq == 2048
    predicted = re.search(r"-> step ([0-9.]+) s, ([0-9]+) tok/s.*MFU ([0-9.]+)", out)
    assert f"{p.step_seconds:.3f}" == predicted.group(1)
    assert f"{p.tokens_per_second:.0f}" == predicted.group(2)
    assert f"{p.mfu:.3f}" == predicted.group(3)
    assert f"layout: {p.layout};" in out
    assert p.device_resident_bytes + p.device_peak_bytes + p.device_workspace_bytes <= p.device_budget
    assert p.host_to_device_bytes > 0  # 8B's state does not fit 24 GiB: it moves
    svg = p.timeline_svg
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")


def test_plan_over_gpus_costs_the_communication():
    config = spillway.RunConfig(command="plan", config="llama3.2-1b", device_mem="80GiB", seq=1024, grad_accum=2)
    one, two = spillway.plan(config), spillway.plan(config, gpus=2)
    assert one.bytes_communicated == 0
    assert two.bytes_communicated > 0 and two.gpus == 2


def test_a_budget_too_small_is_one_line_naming_it():
    with pytest.raises(spillway.Error, match="--device-mem"):
        spillway.plan(spillway.RunConfig(command="plan", device_mem="1GiB"))
