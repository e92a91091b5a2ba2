"""Shared fixtures of the Python tests: the `spillway` command of the same
build (SPILLWAY_BIN, set by ctest), a small generated corpus, a run file for
the tiny model, and one run trained by the command line for the tests that
load a model."""

import json
import os
import random
import subprocess
from pathlib import Path

import pytest


def spillway_bin():
    path = os.environ.get("SPILLWAY_BIN")
    if not path:
        pytest.skip("SPILLWAY_BIN is not set (ctest sets it to the build's spillway command)")
    return path


def run_cli(*args):
    """Runs `spillway ARGS`; returns (stdout, stderr); fails the test on a non-zero exit."""
    done = subprocess.run([spillway_bin(), *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, f"spillway {' '.join(map(str, args))}: {done.stderr}"
    return done.stdout, done.stderr


def make_corpus(documents, seed):
    rng = random.Random(seed)
    subjects = ["the cat", "a dog", "my friend", "the old man", "every child", "the river"]
    verbs = ["sees", "likes", "follows", "finds", "remembers", "carries"]
    objects = ["the moon", "a red ball", "the small house", "her song", "the long road"]
    docs = []
    for _ in range(documents):
        sentences = [f"{rng.choice(subjects).capitalize()} {rng.choice(verbs)} {rng.choice(objects)}."
                     for _ in range(rng.randint(1, 3))]
        docs.append(" ".join(sentences))
    return "\n%\n".join(docs) + "\n%\n"


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(make_corpus(300, 7))
    return path


def write_run_file(path, corpus, steps):
    """The tiny model on the corpus, small and fast: no evaluation, sample or
    periodic checkpoint, so a run's log is its steps."""
    path.write_text(f"""
[model]
config = "tiny"
[data]
paths = [{json.dumps(str(corpus))}]
separator = "%"
vocab_size = 300
[optimizer]
warmup = 2
[schedule]
steps = {steps}
batch = 4
seq = 32
eval_every = 0
eval_batches = 2
checkpoint_every = 0
[sample]
tokens = 0
[run]
quiet = true
""")
    return path


@pytest.fixture
def run_file(tmp_path, corpus):
    return write_run_file(tmp_path / "run.toml", corpus, steps=6)


def step_losses(log_path):
    """The loss of every step record of a train_log.jsonl."""
    lines = [json.loads(line) for line in Path(log_path).read_text().splitlines()]
    return [line["loss"] for line in lines if "event" not in line]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, corpus):
    """A run folder the command line trained (its latest checkpoint is the model)."""
    folder = tmp_path_factory.mktemp("trained")
    run_file = write_run_file(folder / "run.toml", corpus, steps=20)
    run_cli("train", run_file, "--out", folder / "run")
    return folder / "run"
